// Tensor-parallel shards: the ranks' slices put back together are the full matrices, byte for
// byte; invalid rank counts are refused with the valid ones listed.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "parallel/tp_shard.h"

namespace llamaserve {
namespace {

const std::string kFixtures = LLAMASERVE_SOURCE_DIR "/tests/fixtures/reference/";
const std::string kSmolLm2 = LLAMASERVE_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

std::shared_ptr<const LoadedModel> load(const std::string& path) {
  auto model = load_model(path);
  EXPECT_TRUE(model.is_ok()) << model.status().to_string();
  return model.is_ok() ? std::move(model).value() : nullptr;
}

// Row r of the full matrix is the concatenation of row r of every rank's column slice.
void expect_columns_reassemble(const QTensor& full, const std::vector<const QTensor*>& parts) {
  for (int64_t r = 0; r < full.rows(); ++r) {
    std::vector<uint8_t> joined;
    for (const QTensor* part : parts) {
      ASSERT_EQ(part->rows(), full.rows());
      joined.insert(joined.end(), part->row(r), part->row(r) + part->bytes_per_row());
    }
    ASSERT_EQ(joined.size(), full.bytes_per_row()) << full.name;
    ASSERT_EQ(std::memcmp(joined.data(), full.row(r), joined.size()), 0)
        << full.name << " row " << r;
  }
}

// The rows of the full matrix are the rows of rank 0, then rank 1, ...
void expect_rows_reassemble(const QTensor& full, const std::vector<const QTensor*>& parts) {
  int64_t row = 0;
  for (const QTensor* part : parts) {
    ASSERT_EQ(part->cols(), full.cols());
    ASSERT_EQ(std::memcmp(part->data, full.row(row), part->n_bytes), 0) << full.name;
    row += part->rows();
  }
  EXPECT_EQ(row, full.rows()) << full.name;
}

TEST(TensorParallelShard, SlicesReassembleTheFullMatrices) {
  auto model = load(kFixtures + "tiny-llama-f16.gguf");
  ASSERT_NE(model, nullptr);
  constexpr int kRanks = 2;
  std::vector<std::shared_ptr<const LoadedModel>> shards;
  for (int r = 0; r < kRanks; ++r) {
    auto shard = tensor_parallel_shard(model, r, kRanks);
    ASSERT_TRUE(shard.is_ok()) << shard.status().to_string();
    shards.push_back(std::move(shard).value());
  }
  const ModelConfig& c = model->config;
  for (const auto& shard : shards) {
    EXPECT_EQ(shard->config.n_head, c.n_head / kRanks);
    EXPECT_EQ(shard->config.n_head_kv, c.n_head_kv / kRanks);
    EXPECT_EQ(shard->config.n_ff, c.n_ff / kRanks);
    EXPECT_EQ(shard->config.n_embd, c.n_embd);
    EXPECT_EQ(shard->file, nullptr);
    EXPECT_EQ(shard->weights.token_embd.data, model->weights.token_embd.data);
  }
  for (size_t i = 0; i < model->weights.layers.size(); ++i) {
    const LayerWeights& full = model->weights.layers[i];
    const LayerWeights& a = shards[0]->weights.layers[i];
    const LayerWeights& b = shards[1]->weights.layers[i];
    expect_rows_reassemble(full.wq, {&a.wq, &b.wq});
    expect_rows_reassemble(full.wk, {&a.wk, &b.wk});
    expect_rows_reassemble(full.wv, {&a.wv, &b.wv});
    expect_rows_reassemble(full.w_gate, {&a.w_gate, &b.w_gate});
    expect_rows_reassemble(full.w_up, {&a.w_up, &b.w_up});
    expect_columns_reassemble(full.wo, {&a.wo, &b.wo});
    expect_columns_reassemble(full.w_down, {&a.w_down, &b.w_down});
  }
  // Together the ranks hold the layers' bytes once plus the whole embeddings and head each.
  uint64_t layer_bytes = 0;
  for (const auto& shard : shards) layer_bytes += shard->weight_bytes();
  EXPECT_GT(layer_bytes, model->weight_bytes());
}

TEST(TensorParallelShard, QuantizedColumnSlicesKeepWholeBlocks) {
  if (!std::filesystem::exists(kSmolLm2)) GTEST_SKIP() << "model missing: " << kSmolLm2;
  auto model = load(kSmolLm2);
  ASSERT_NE(model, nullptr);
  // 9 heads, 3 KV heads, FFN 1536, Q4_1 blocks of 32: 1 and 3 split it.
  EXPECT_EQ(valid_tensor_parallel_sizes(*model, 8), (std::vector<int>{1, 3}));
  std::vector<std::shared_ptr<const LoadedModel>> shards;
  for (int r = 0; r < 3; ++r) {
    auto shard = tensor_parallel_shard(model, r, 3);
    ASSERT_TRUE(shard.is_ok()) << shard.status().to_string();
    shards.push_back(std::move(shard).value());
  }
  const LayerWeights& full = model->weights.layers[7];
  expect_columns_reassemble(full.wo,
                            {&shards[0]->weights.layers[7].wo, &shards[1]->weights.layers[7].wo,
                             &shards[2]->weights.layers[7].wo});
  expect_columns_reassemble(
      full.w_down, {&shards[0]->weights.layers[7].w_down, &shards[1]->weights.layers[7].w_down,
                    &shards[2]->weights.layers[7].w_down});
}

TEST(TensorParallelShard, InvalidSizesAreRefusedWithTheValidOnes) {
  auto model = load(kFixtures + "tiny-gqa-q4_k.gguf");
  ASSERT_NE(model, nullptr);
  // 4 heads, 2 KV heads, but 256-element Q4_K blocks: 128 columns per rank is not a block.
  const Status two = check_tensor_parallel(*model, 2);
  EXPECT_EQ(two.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(two.message().find("256-element"), std::string::npos) << two.message();
  EXPECT_NE(two.message().find("valid sizes for this model: 1"), std::string::npos)
      << two.message();
  auto gqa = load(kFixtures + "tiny-gqa-q8_0.gguf");
  ASSERT_NE(gqa, nullptr);
  const Status kv = check_tensor_parallel(*gqa, 2);
  EXPECT_NE(kv.message().find("1 KV heads"), std::string::npos) << kv.message();
  EXPECT_FALSE(tensor_parallel_shard(gqa, 0, 2).is_ok());
  EXPECT_FALSE(tensor_parallel_shard(gqa, 1, 1).is_ok());  // no rank 1 of 1
  EXPECT_TRUE(tensor_parallel_shard(gqa, 0, 1).is_ok());
}

}  // namespace
}  // namespace llamaserve
