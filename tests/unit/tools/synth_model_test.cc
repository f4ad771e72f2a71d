// Synthetic models: exact shapes, the vocabulary's tokenizer, weight statistics, determinism
// across thread counts, the quantized mix, and a forward pass with finite logits.
#include <gtest/gtest.h>

#include <cmath>

#include "executor/cpu_executor.h"
#include "gguf/gguf.h"
#include "model/importers/synth_model.h"
#include "model/shapes.h"
#include "model/weights.h"
#include "quant/quant.h"
#include "tokenizer/tokenizer_data.h"
#include "tools_test_util.h"

namespace llamaserve {
namespace {

using namespace tools_test;

SynthOptions tiny_options(const TempDir& dir, const std::string& file, const std::string& type) {
  SynthOptions o;
  o.shape = "tiny";
  o.type = type;
  o.output_path = dir.file(file);
  o.vocab_path = (kFixtures / "vocab-llama2-spm.gguf").string();
  o.seed = 42;
  o.threads = 2;
  o.progress = ProgressStyle::kSilent;
  return o;
}

TEST(SynthModelTest, GeneratorHasUnitVarianceAndIsBounded) {
  double sum = 0.0, sum_sq = 0.0, max_abs = 0.0;
  constexpr int kN = 1 << 20;
  for (uint64_t i = 0; i < kN; ++i) {
    const double v = synthetic_value(7, 3, i);
    sum += v;
    sum_sq += v * v;
    max_abs = std::max(max_abs, std::fabs(v));
  }
  EXPECT_NEAR(sum / kN, 0.0, 0.01);
  EXPECT_NEAR(sum_sq / kN, 1.0, 0.01);
  EXPECT_LE(max_abs, 2.0 * std::sqrt(3.0));
  EXPECT_NE(synthetic_value(7, 3, 0), synthetic_value(8, 3, 0));
  EXPECT_NE(synthetic_value(7, 3, 0), synthetic_value(7, 4, 0));
}

TEST(SynthModelTest, TinyF16LoadsRunsAndIsDeterministic) {
  TempDir dir;
  SynthOptions o = tiny_options(dir, "tiny.gguf", "f16");
  auto summary = write_synthetic_model(o);
  ASSERT_TRUE(summary.is_ok()) << summary.status().to_string();
  EXPECT_TRUE(summary->notes.empty());

  SynthOptions one_thread = o;
  one_thread.output_path = dir.file("tiny-1.gguf");
  one_thread.threads = 1;
  ASSERT_TRUE(write_synthetic_model(one_thread).is_ok());
  EXPECT_EQ(read_bytes(o.output_path), read_bytes(one_thread.output_path));

  auto model = load_model(o.output_path);
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  const ModelConfig& c = (*model)->config;
  const ModelShape& shape = **find_model_shape("tiny");
  EXPECT_EQ(c.n_embd, shape.n_embd);
  EXPECT_EQ(c.n_layer, shape.n_layer);
  EXPECT_EQ(c.n_head_kv, shape.n_head_kv);
  EXPECT_EQ(c.n_vocab, shape.n_vocab);
  EXPECT_FALSE(c.tied_output);

  // The vocabulary file's tokenizer, unchanged.
  auto vocab = GgufFile::open(o.vocab_path);
  ASSERT_TRUE(vocab.is_ok());
  auto expected = tokenizer_data_from_gguf(**vocab);
  auto got = tokenizer_data_from_gguf(*(*model)->file);
  ASSERT_TRUE(expected.is_ok() && got.is_ok());
  EXPECT_EQ(got->tokens, expected->tokens);
  EXPECT_EQ(got->scores, expected->scores);

  // Norms are 1; matrices have the requested spread.
  const QTensor& norm = (*model)->weights.layers[0].attn_norm;
  for (int64_t i = 0; i < norm.cols(); ++i) ASSERT_EQ(norm.f32()[i], 1.0f);
  const QTensor& wq = (*model)->weights.layers[1].wq;
  std::vector<float> row(static_cast<size_t>(wq.cols()));
  double sum_sq = 0.0;
  for (int64_t r = 0; r < wq.rows(); ++r) {
    ASSERT_TRUE(dequantize_row(wq.type, wq.row(r), row.data(), wq.cols()).is_ok());
    for (float v : row) sum_sq += v * v;
  }
  EXPECT_NEAR(std::sqrt(sum_sq / (wq.rows() * wq.cols())), 0.02, 0.001);

  CpuExecutorOptions options;
  options.threads = 2;
  options.kv_capacity_tokens = 64;
  auto executor = create_cpu_executor(*model, options);
  ASSERT_TRUE(executor.is_ok()) << executor.status().to_string();
  Batch batch;
  for (int32_t i = 0; i < 8; ++i) {
    batch.tokens.push_back(100 + 37 * i);
    batch.positions.push_back(i);
    batch.seq_index.push_back(0);
  }
  batch.logit_rows = {7};
  batch.blocks_per_seq = 1;
  batch.block_tables = {0};
  batch.seq_lengths = {8};
  std::vector<float> logits(static_cast<size_t>(c.n_vocab));
  ASSERT_TRUE((*executor)->forward(batch, logits).is_ok());
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
}

TEST(SynthModelTest, QuantizedMixAndErrors) {
  TempDir dir;
  SynthOptions o = tiny_options(dir, "tiny-q4km.gguf", "q4_k_m");
  auto summary = write_synthetic_model(o);
  ASSERT_TRUE(summary.is_ok()) << summary.status().to_string();
  auto file = GgufFile::open(o.output_path);
  ASSERT_TRUE(file.is_ok());
  EXPECT_EQ(file.value()->get_int("general.file_type"), 15);
  EXPECT_EQ(file.value()->find_tensor("output.weight")->type, TensorType::Q6_K);
  EXPECT_EQ(file.value()->find_tensor("blk.1.attn_q.weight")->type, TensorType::Q4_K);
  // 4 layers: use_more_bits picks layers 2 (every third from n/8 = 0) and 3 (the last eighth).
  EXPECT_EQ(file.value()->find_tensor("blk.0.attn_v.weight")->type, TensorType::Q4_K);
  EXPECT_EQ(file.value()->find_tensor("blk.2.attn_v.weight")->type, TensorType::Q6_K);
  EXPECT_EQ(file.value()->find_tensor("blk.3.ffn_down.weight")->type, TensorType::Q6_K);
  EXPECT_EQ(file.value()->find_tensor("blk.0.attn_norm.weight")->type, TensorType::F32);

  SynthOptions bad = tiny_options(dir, "x.gguf", "f16");
  bad.shape = "llama2-8b";
  EXPECT_FALSE(write_synthetic_model(bad).is_ok());
  bad = tiny_options(dir, "x.gguf", "q3_k");
  EXPECT_FALSE(write_synthetic_model(bad).is_ok());
  bad = tiny_options(dir, "x.gguf", "f16");
  bad.vocab_path = (kFixtures / "vocab-llama3-bpe.gguf").string();  // 128256 tokens
  auto mismatch = write_synthetic_model(bad);
  ASSERT_FALSE(mismatch.is_ok());
  EXPECT_NE(mismatch.status().message().find("128256 tokens"), std::string::npos);
  bad.vocab_path = dir.file("missing.gguf");
  EXPECT_FALSE(write_synthetic_model(bad).is_ok());
  EXPECT_FALSE(fs::exists(dir.path() / "x.gguf"));
}

}  // namespace
}  // namespace llamaserve
