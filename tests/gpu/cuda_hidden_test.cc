// Executor::forward_hidden of the single-GPU executor against the CPU executor's on the fixture
// models: the final-normed rows that embeddings are pooled from, for batches of odd sizes
// (pieces above max_batch_tokens, head groups above max_logit_rows, a subset of rows, a chunk
// that continues a sequence), each row's cosine >= 0.999.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "batch_builders.h"
#include "executor/cpu_executor.h"
#include "executor/cuda_executor.h"
#include "model/weights.h"
#include "test_util.h"

namespace llamaserve::cuda::testing {
namespace {

namespace fs = std::filesystem;
using gpu_testing::build;
using gpu_testing::Rows;
using gpu_testing::tokens;

// Eight sequences of gpu_testing::kBlocksPerSeq blocks of 16 tokens.
constexpr int64_t kKvTokens = 8 * gpu_testing::kBlocksPerSeq * 16;

std::vector<float> hidden_of(Executor& executor, const Batch& batch) {
  std::vector<float> hidden(batch.logit_rows.size() * executor.config().n_embd,
                            std::numeric_limits<float>::quiet_NaN());
  const Status status = executor.forward_hidden(batch, hidden);
  EXPECT_TRUE(status.is_ok()) << status.to_string();
  return hidden;
}

void expect_rows_close(const std::vector<float>& got, const std::vector<float>& want,
                       int64_t n_embd, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t row = 0; row * n_embd < got.size(); ++row) {
    double dot = 0, gg = 0, ww = 0;
    for (int64_t c = 0; c < n_embd; ++c) {
      const double g = got[row * n_embd + c];
      const double w = want[row * n_embd + c];
      dot += g * w;
      gg += g * g;
      ww += w * w;
    }
    const double cosine = dot / std::sqrt(gg * ww);
    EXPECT_GE(cosine, 0.999) << what << ", row " << row;
  }
}

class CudaHiddenTest : public GpuTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(CudaHiddenTest, MatchesCpuExecutor) {
  const fs::path path = source_dir() / "tests" / "fixtures" / "reference" / GetParam();
  auto model = load_model(path.string());
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  const int64_t n_vocab = (*model)->config.n_vocab;
  const int64_t n_embd = (*model)->config.n_embd;

  CudaExecutorOptions cuda_options;
  cuda_options.kv_capacity_tokens = kKvTokens;
  cuda_options.max_batch_tokens = 100;  // pieces, and head groups of 100 rows
  cuda_options.max_seqs = 16;
  cuda_options.max_context_tokens = gpu_testing::kBlocksPerSeq * 16;
  auto cuda = create_cuda_executor(*model, cuda_options);
  ASSERT_TRUE(cuda.is_ok()) << cuda.status().to_string();
  ASSERT_TRUE((*cuda)->returns_hidden());
  CpuExecutorOptions cpu_options;
  cpu_options.kv_capacity_tokens = kKvTokens;
  auto cpu = create_cpu_executor(*model, cpu_options);
  ASSERT_TRUE(cpu.is_ok()) << cpu.status().to_string();

  // Four sequences of odd lengths, every row: 439 rows in 5 pieces.
  const Batch first = build({{0, tokens(131, n_vocab, 1), 0},
                             {1, tokens(7, n_vocab, 2), 0},
                             {2, tokens(1, n_vocab, 3), 0},
                             {3, tokens(300, n_vocab, 4), 0}},
                            4);
  expect_rows_close(hidden_of(**cuda, first), hidden_of(**cpu, first), n_embd, "every row");

  // Continuations of sequences 0 to 3 (a batch sequence's index is its KV identity here) and
  // a new sequence 4; only every third row, and the last row of each sequence.
  Batch next = build({{0, tokens(5, n_vocab, 5), 131},
                      {1, tokens(2, n_vocab, 8), 7},
                      {2, tokens(1, n_vocab, 9), 1},
                      {3, tokens(77, n_vocab, 6), 300},
                      {4, tokens(13, n_vocab, 7), 0}},
                     5);
  std::set<int32_t> rows;
  for (int32_t r = 0; r < next.n_tokens(); r += 3) rows.insert(r);
  for (int32_t r : {4, 6, 7, 84, 97}) rows.insert(r);
  next.logit_rows.assign(rows.begin(), rows.end());
  expect_rows_close(hidden_of(**cuda, next), hidden_of(**cpu, next), n_embd, "continued rows");

  // No rows wanted: nothing written, no error.
  Batch none = build({{0, tokens(3, n_vocab, 10), 136}}, 1);
  none.logit_rows.clear();
  EXPECT_TRUE((*cuda)->forward_hidden(none, {}).is_ok());
}

INSTANTIATE_TEST_SUITE_P(FixtureModels, CudaHiddenTest,
                         ::testing::Values("tiny-llama-f16.gguf", "tiny-gqa-q8_0.gguf",
                                           "tiny-gqa-q4_k.gguf", "tiny-qwen2-q8_0.gguf"));

}  // namespace
}  // namespace llamaserve::cuda::testing
