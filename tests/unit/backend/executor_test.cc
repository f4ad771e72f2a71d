// Executor-level properties of the CPU executor on the small fixture models: batching,
// chunked prefill and oversized batches give the same logits as one sequence at a time, and
// malformed batches are refused with a Status.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "executor/cpu_executor.h"

namespace llamaserve {
namespace {

namespace fs = std::filesystem;

const fs::path kFixtures = fs::path(LLAMASERVE_SOURCE_DIR) / "tests" / "fixtures" / "reference";

std::shared_ptr<const LoadedModel> load(const std::string& name) {
  auto model = load_model((kFixtures / name).string());
  EXPECT_TRUE(model.is_ok()) << model.status().to_string();
  return model.is_ok() ? *model : nullptr;
}

std::unique_ptr<Executor> make_executor(std::shared_ptr<const LoadedModel> model,
                                        int32_t max_batch_tokens = 512, int threads = 2) {
  CpuExecutorOptions options;
  options.kv_capacity_tokens = 64 * 16;
  options.max_batch_tokens = max_batch_tokens;
  options.threads = threads;
  auto executor = create_cpu_executor(std::move(model), options);
  EXPECT_TRUE(executor.is_ok()) << executor.status().to_string();
  return executor.is_ok() ? std::move(executor).value() : nullptr;
}

std::vector<int32_t> random_tokens(size_t n, int64_t n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(n_vocab) - 1);
  std::vector<int32_t> tokens(n);
  for (int32_t& t : tokens) t = dist(rng);
  return tokens;
}

constexpr int32_t kBlocksPerSeq = 8;

// Builds a Batch from per-sequence pieces; sequence s owns physical blocks given by its table.
struct Piece {
  int32_t seq;
  std::vector<int32_t> tokens;
  int32_t first_position;
};

Batch build(const std::vector<Piece>& pieces, const std::vector<std::vector<int32_t>>& tables,
            std::vector<int32_t> seq_lengths) {
  Batch b;
  b.blocks_per_seq = kBlocksPerSeq;
  for (const auto& table : tables) {
    std::vector<int32_t> padded = table;
    padded.resize(kBlocksPerSeq, -1);
    b.block_tables.insert(b.block_tables.end(), padded.begin(), padded.end());
  }
  b.seq_lengths = std::move(seq_lengths);
  for (const Piece& piece : pieces) {
    for (size_t i = 0; i < piece.tokens.size(); ++i) {
      b.tokens.push_back(piece.tokens[i]);
      b.positions.push_back(piece.first_position + static_cast<int32_t>(i));
      b.seq_index.push_back(piece.seq);
    }
  }
  for (int32_t r = 0; r < b.n_tokens(); ++r) b.logit_rows.push_back(r);
  return b;
}

std::vector<float> run(Executor& ex, const Batch& batch) {
  std::vector<float> logits(batch.logit_rows.size() * ex.config().n_vocab);
  const Status status = ex.forward(batch, logits);
  EXPECT_TRUE(status.is_ok()) << status.to_string();
  return logits;
}

void expect_identical(const float* a, const float* b, int64_t n, const std::string& what) {
  double worst = 0.0, scale = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  // Bit-identical, not merely close: each row's arithmetic does not depend on what else is in
  // the batch or how a prompt is chunked, so a sequence recomputed after preemption continues
  // exactly as it would have.
  EXPECT_EQ(worst, 0.0) << what << " (largest |logit| " << scale << ")";
}

class ExecutorTest : public ::testing::TestWithParam<const char*> {};

// Three sequences prefilled one at a time, then all together in one Batch (rows
// interleaved), then a mixed step of one prefill chunk and two decode tokens.
TEST_P(ExecutorTest, BatchedEqualsUnbatched) {
  auto model = load(GetParam());
  ASSERT_NE(model, nullptr);
  const int64_t n_vocab = model->config.n_vocab;
  const std::vector<std::vector<int32_t>> prompts = {
      random_tokens(5, n_vocab, 1), random_tokens(16, n_vocab, 2), random_tokens(23, n_vocab, 3)};
  // Scattered physical blocks, disjoint between sequences.
  const std::vector<std::vector<int32_t>> tables = {{9, 3}, {4, 12, 0}, {7, 1, 30}};

  auto alone = make_executor(model);
  std::vector<std::vector<float>> expected;
  for (int32_t s = 0; s < 3; ++s) {
    expected.push_back(run(*alone, build({{0, prompts[s], 0}}, {tables[s]},
                                         {static_cast<int32_t>(prompts[s].size())})));
  }

  // Together: the rows of the three prompts interleaved round-robin.
  auto together = make_executor(model);
  Batch batch;
  batch.blocks_per_seq = kBlocksPerSeq;
  for (const auto& table : tables) {
    std::vector<int32_t> padded = table;
    padded.resize(kBlocksPerSeq, -1);
    batch.block_tables.insert(batch.block_tables.end(), padded.begin(), padded.end());
  }
  std::vector<std::pair<int32_t, int32_t>> origin;  // (sequence, position) of each row
  for (int32_t pos = 0; pos < 23; ++pos) {
    for (int32_t s = 0; s < 3; ++s) {
      if (pos < static_cast<int32_t>(prompts[s].size())) {
        batch.tokens.push_back(prompts[s][pos]);
        batch.positions.push_back(pos);
        batch.seq_index.push_back(s);
        origin.emplace_back(s, pos);
      }
    }
  }
  batch.seq_lengths = {5, 16, 23};
  for (int32_t r = batch.n_tokens() - 1; r >= 0; --r) batch.logit_rows.push_back(r);  // any order
  const std::vector<float> mixed = run(*together, batch);
  for (size_t i = 0; i < batch.logit_rows.size(); ++i) {
    const auto [s, pos] = origin[static_cast<size_t>(batch.logit_rows[i])];
    expect_identical(mixed.data() + i * n_vocab, expected[s].data() + pos * n_vocab, n_vocab,
                     "sequence " + std::to_string(s) + " position " + std::to_string(pos));
  }

  // One more step: sequence 0 decodes, sequence 1 prefills a chunk of 4, sequence 2 decodes;
  // compare against the same steps run alone.
  const std::vector<int32_t> next0 = {11}, next1 = random_tokens(4, n_vocab, 4), next2 = {17};
  const Batch step = build({{0, next0, 5}, {1, next1, 16}, {2, next2, 23}}, tables, {6, 20, 24});
  const std::vector<float> step_logits = run(*together, step);
  const std::vector<float> alone0 = run(*alone, build({{0, next0, 5}}, {tables[0]}, {6}));
  const std::vector<float> alone1 = run(*alone, build({{0, next1, 16}}, {tables[1]}, {20}));
  const std::vector<float> alone2 = run(*alone, build({{0, next2, 23}}, {tables[2]}, {24}));
  expect_identical(step_logits.data(), alone0.data(), n_vocab, "decode of sequence 0");
  expect_identical(step_logits.data() + n_vocab, alone1.data(), 4 * n_vocab, "chunk of sequence 1");
  expect_identical(step_logits.data() + 5 * n_vocab, alone2.data(), n_vocab,
                   "decode of sequence 2");
}

// A 41-token prompt in one pass, in chunks of 7 (each chunk its own forward), and in one
// Batch larger than max_batch_tokens (split inside the executor).
TEST_P(ExecutorTest, ChunkedPrefillEqualsOnePiece) {
  auto model = load(GetParam());
  ASSERT_NE(model, nullptr);
  const int64_t n_vocab = model->config.n_vocab;
  const std::vector<int32_t> prompt = random_tokens(41, n_vocab, 5);
  const std::vector<std::vector<int32_t>> table = {{5, 2, 8}};

  auto whole_ex = make_executor(model);
  const std::vector<float> whole = run(*whole_ex, build({{0, prompt, 0}}, table, {41}));

  auto chunk_ex = make_executor(model);
  for (int32_t first = 0; first < 41; first += 7) {
    const int32_t last = std::min(41, first + 7);
    const std::vector<int32_t> chunk(prompt.begin() + first, prompt.begin() + last);
    const std::vector<float> logits = run(*chunk_ex, build({{0, chunk, first}}, table, {last}));
    expect_identical(logits.data(), whole.data() + first * n_vocab, (last - first) * n_vocab,
                     "chunk at " + std::to_string(first));
  }

  auto small_ex = make_executor(model, /*max_batch_tokens=*/8, /*threads=*/1);
  Batch batch = build({{0, prompt, 0}}, table, {41});
  batch.logit_rows = {40, 3, 17, 8};  // rows of several pieces, out of order
  const std::vector<float> split = run(*small_ex, batch);
  for (size_t i = 0; i < batch.logit_rows.size(); ++i) {
    expect_identical(split.data() + i * n_vocab, whole.data() + batch.logit_rows[i] * n_vocab,
                     n_vocab, "split batch row " + std::to_string(batch.logit_rows[i]));
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ExecutorTest,
                         ::testing::Values("tiny-gqa-q4_k.gguf", "tiny-qwen2-q8_0.gguf",
                                           "tiny-llama-f16.gguf"),
                         [](const auto& info) {
                           std::string name = info.param;
                           name = name.substr(0, name.find('.'));
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(Executor, RejectsMalformedBatches) {
  auto model = load("tiny-qwen2-q8_0.gguf");
  ASSERT_NE(model, nullptr);
  auto ex = make_executor(model);
  const int64_t n_vocab = model->config.n_vocab;
  const Batch good = build({{0, {1, 2, 3}, 0}}, {{0}}, {3});
  std::vector<float> logits(3 * n_vocab);
  ASSERT_TRUE(ex->forward(good, logits).is_ok());

  auto expect_invalid = [&](Batch b, const std::string& needle) {
    const Status status = ex->forward(b, logits);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << needle << ": " << status.to_string();
    EXPECT_NE(status.message().find(needle), std::string::npos) << status.to_string();
  };
  Batch b = good;
  b.tokens[1] = static_cast<int32_t>(n_vocab);
  expect_invalid(b, "token id");
  b = good;
  b.block_tables[0] = 10000;
  expect_invalid(b, "block table");
  b = good;
  b.positions = {0, 2, 3};
  b.seq_lengths = {4};
  expect_invalid(b, "does not follow");
  b = good;
  b.logit_rows = {3};
  expect_invalid(b, "logit row");
  b = good;
  b.seq_index[2] = 1;
  expect_invalid(b, "sequence index");
  b = good;
  b.seq_lengths = {2};
  expect_invalid(b, "position 2");
  b = good;
  b.positions.pop_back();
  expect_invalid(b, "positions");
  b.clear();
  expect_invalid(b, "no tokens");
  std::vector<float> small(n_vocab);
  EXPECT_EQ(ex->forward(good, small).code(), StatusCode::kInvalidArgument);
}

TEST(Executor, OptionsAndCapacity) {
  auto model = load("tiny-gqa-q4_k.gguf");
  ASSERT_NE(model, nullptr);
  const ModelConfig& c = model->config;

  CpuExecutorOptions options;
  options.kv_capacity_bytes = 1 << 20;
  auto by_bytes = create_cpu_executor(model, options);
  ASSERT_TRUE(by_bytes.is_ok()) << by_bytes.status().to_string();
  const KvCacheInfo info = (*by_bytes)->kv_info();
  EXPECT_EQ(info.block_size, 16);
  EXPECT_EQ(info.bytes_per_block, kv_bytes_per_token(c, TensorType::F16) * 16);
  EXPECT_EQ(static_cast<uint64_t>(info.n_blocks), (1u << 20) / info.bytes_per_block);
  EXPECT_NE((*by_bytes)->describe().find("cpu"), std::string::npos);

  CpuExecutorOptions defaults;  // min(n_ctx_train, 8192) x 4 tokens
  auto by_default = create_cpu_executor(model, defaults);
  ASSERT_TRUE(by_default.is_ok());
  EXPECT_EQ((*by_default)->kv_info().n_blocks, std::min<int64_t>(c.n_ctx_train, 8192) * 4 / 16);

  CpuExecutorOptions f32;
  f32.kv_type = TensorType::F32;
  f32.kv_capacity_tokens = 100;
  auto f32_ex = create_cpu_executor(model, f32);
  ASSERT_TRUE(f32_ex.is_ok());
  EXPECT_EQ((*f32_ex)->kv_info().n_blocks, 7);  // ceil(100 / 16)
  EXPECT_EQ((*f32_ex)->kv_info().bytes_per_block, kv_bytes_per_token(c, TensorType::F32) * 16);

  CpuExecutorOptions bad;
  bad.kv_block_size = 0;
  EXPECT_EQ(create_cpu_executor(model, bad).status().code(), StatusCode::kInvalidArgument);
  bad = {};
  bad.kv_type = TensorType::Q4_0;
  EXPECT_EQ(create_cpu_executor(model, bad).status().code(), StatusCode::kUnsupported);
  bad = {};
  bad.kv_capacity_bytes = 10;  // less than one block
  EXPECT_EQ(create_cpu_executor(model, bad).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(create_cpu_executor(nullptr, {}).status().code(), StatusCode::kInvalidArgument);
}

// The f16 and Q8_0 caches agree with the f32 one to their rounding (on F16 weights, where the
// activations stay float; 8-bit activation rounding would amplify the difference).
TEST(Executor, KvCacheTypesAgree) {
  auto model = load("tiny-llama-f16.gguf");
  ASSERT_NE(model, nullptr);
  const int64_t n_vocab = model->config.n_vocab;
  const std::vector<int32_t> prompt = random_tokens(20, n_vocab, 6);
  const TensorType types[] = {TensorType::F32, TensorType::F16, TensorType::Q8_0};
  std::vector<float> results[3];
  for (int i = 0; i < 3; ++i) {
    CpuExecutorOptions options;
    options.kv_capacity_tokens = 256;
    options.kv_type = types[i];
    auto ex = create_cpu_executor(model, options);
    ASSERT_TRUE(ex.is_ok()) << ex.status().to_string();
    EXPECT_EQ((*ex)->kv_info().bytes_per_block, kv_bytes_per_token(model->config, types[i]) * 16);
    results[i] = run(**ex, build({{0, prompt, 0}}, {{0, 1}}, {20}));
  }
  double scale = 0.0;
  for (float x : results[0]) scale = std::max(scale, std::fabs(static_cast<double>(x)));
  const double tolerance[] = {0.0, 5e-3, 3e-2};  // f16: 11 bits; Q8_0: 7 bits and a scale
  for (int i = 1; i < 3; ++i) {
    double worst = 0.0;
    for (size_t j = 0; j < results[0].size(); ++j) {
      worst = std::max(worst, std::fabs(static_cast<double>(results[i][j]) - results[0][j]));
    }
    EXPECT_LE(worst, tolerance[i] * scale) << type_name(types[i]);
    EXPECT_GT(worst, 0.0) << type_name(types[i]);  // the caches really differ in precision
    std::printf("%s KV cache: max |logit - f32 cache's| = %.3g of max |logit| %.3g\n",
                type_name(types[i]), worst, scale);
  }
}

// Every working buffer starts a cache line, so that the threads' column ranges of a row (whole
// 64-byte pieces) never share one.
TEST(CpuBackend, ActivationBuffersStartCacheLines) {
  auto model = load("tiny-llama-f16.gguf");
  ASSERT_NE(model, nullptr);
  for (int64_t max_tokens : {1, 7, 32}) {
    cpu::CpuActivations act(model->config, max_tokens, 3, 16);
    for (const auto* buffer : {&act.hidden, &act.normed, &act.q, &act.k, &act.v, &act.attn,
                               &act.gate, &act.up, &act.rope_cos, &act.rope_sin, &act.head_rows}) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer->data()) % kCacheLineBytes, 0u) << max_tokens;
    }
  }
}

// A model split into two LayerRanges (as pipeline stages run it), each with its own KV cache
// for its layers and the hidden state handed over, gives the single-range logits.
TEST(CpuBackend, SplitLayerRangesEqualOneRange) {
  auto model = load("tiny-llama-f16.gguf");
  ASSERT_NE(model, nullptr);
  const ModelConfig& c = model->config;
  ASSERT_EQ(c.n_layer, 3);
  ThreadPool pool(2);
  auto backend = cpu::CpuBackend::create(model, &pool, {});
  ASSERT_TRUE(backend.is_ok()) << backend.status().to_string();
  auto make_cache = [&](int32_t first, int32_t n_layers) {
    cpu::KvCacheGeometry g;
    g.first_layer = first;
    g.n_layers = n_layers;
    g.n_blocks = 8;
    g.n_head_kv = c.n_head_kv;
    g.head_dim = c.head_dim;
    return std::move(cpu::CpuKvCache::create(g)).value();
  };
  const Batch batch = build({{0, random_tokens(21, c.n_vocab, 7), 0}}, {{3, 5}}, {21});
  std::vector<float> whole(batch.logit_rows.size() * c.n_vocab);
  {
    auto cache = make_cache(0, 3);
    cpu::CpuActivations act(c, 32, pool.size(), 16);
    ASSERT_TRUE((*backend)->forward(batch, {0, 3, true, true}, *cache, act, whole).is_ok());
  }
  auto first_cache = make_cache(0, 2);
  auto second_cache = make_cache(2, 1);
  cpu::CpuActivations first_act(c, 32, pool.size(), 16);
  cpu::CpuActivations second_act(c, 32, pool.size(), 16);
  ASSERT_TRUE((*backend)->forward(batch, {0, 2, true, false}, *first_cache, first_act, {}).is_ok());
  std::copy_n(first_act.hidden.begin(), batch.n_tokens() * c.n_embd, second_act.hidden.begin());
  std::vector<float> split(whole.size());
  ASSERT_TRUE(
      (*backend)->forward(batch, {2, 3, false, true}, *second_cache, second_act, split).is_ok());
  expect_identical(split.data(), whole.data(), static_cast<int64_t>(whole.size()), "split ranges");
  // A range the cache does not hold is refused.
  EXPECT_EQ((*backend)->forward(batch, {0, 3, true, true}, *second_cache, second_act, split).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace llamaserve
