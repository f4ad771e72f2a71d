// The multi-GPU executors against the single-GPU executor on the same model: tensor parallel
// (tp=2), pipeline (pp=2, balanced and an explicit split) and both (tp=2 x pp=2, on "0,1,0,1"
// where only two GPUs exist) give the same logits for prefill, mixed prefill/decode and
// oversized batches, and the same greedy tokens step by step with CUDA graphs; pp=2 with
// micro-batches in flight gives exactly what it gives with the stages in turn; an engine over
// each layout runs concurrent requests with cancellations and leaves every KV block free and
// every byte of device memory returned. Skips below 2 GPUs.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include "backend/cuda/sampling.h"
#include "batch_builders.h"
#include "engine/engine.h"
#include "engine/engine_group.h"
#include "model/importers/synth_model.h"
#include "parallel/cuda_executor.h"
#include "parallel/executor_factory.h"
#include "parallel/multi_gpu_executor.h"
#include "parallel/tp_shard.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace llamaserve {
namespace {

namespace fs = std::filesystem;
using cuda::testing::device_count;
using cuda::testing::source_dir;
using cuda::testing::vocab_path;

class MultiGpuTest : public cuda::testing::TwoGpuTest {};

std::shared_ptr<const LoadedModel> load(const fs::path& path) {
  auto model = load_model(path.string());
  EXPECT_TRUE(model.is_ok()) << model.status().to_string();
  return model.is_ok() ? *model : nullptr;
}

// A synthetic tiny Q8_0 model (4 heads, 2 KV heads, FFN 768: tp=2 divides it), made once.
std::shared_ptr<const LoadedModel> tiny_q8_0() {
  static std::shared_ptr<const LoadedModel> model = [] {
    const fs::path path = fs::temp_directory_path() / "llamaserve-multi-gpu-tiny-q8_0.gguf";
    SynthOptions o;
    o.shape = "tiny";
    o.type = "q8_0";
    o.output_path = path.string();
    o.vocab_path = vocab_path();
    o.seed = 11;
    auto written = write_synthetic_model(o);
    EXPECT_TRUE(written.is_ok()) << written.status().to_string();
    return written.is_ok() ? load(path) : nullptr;
  }();
  return model;
}

ExecutorOptions small(const std::string& devices, int tp, int pp) {
  ExecutorOptions o;
  o.device = devices;
  o.tensor_parallel = tp;
  o.pipeline_parallel = pp;
  o.kv_capacity_tokens = 3 * 32 * 16;  // three sequences of kBlocksPerSeq blocks
  o.max_batch_tokens = 64;             // batches above it run in pieces
  o.max_seqs = 16;
  o.max_context_tokens = 512;
  // The stages in turn (the tests of micro-batches in flight ask for them): a micro-batch's
  // rows may take other kernels (matvec or cuBLAS, by row count) than the whole pass's.
  o.pipeline_micro_batches = 1;
  return o;
}

// small() with pipeline micro-batches in flight from one row per micro-batch.
ExecutorOptions micro_batched(ExecutorOptions o) {
  o.pipeline_micro_batches = 2;
  o.micro_batch_min_rows = 1;
  return o;
}

std::unique_ptr<Executor> make(std::shared_ptr<const LoadedModel> model, const ExecutorOptions& o) {
  auto executor = create_executor(std::move(model), o);
  EXPECT_TRUE(executor.is_ok()) << executor.status().to_string();
  return executor.is_ok() ? std::move(executor).value() : nullptr;
}

// tp x pp over an explicit device list, with small()'s options: the server's device lists
// (create_executor) never repeat a device, but tp 2 x pp 2 on a 2-GPU machine is "0,1,0,1"
// (each stage's communicator still has distinct devices).
std::unique_ptr<Executor> make_layout(std::shared_ptr<const LoadedModel> model,
                                      std::vector<int> devices, int tp, int pp,
                                      int64_t kv_capacity_tokens = 3 * 32 * 16) {
  const ExecutorOptions o = small("0", tp, pp);
  CudaExecutorOptions base;
  base.kv_capacity_tokens = kv_capacity_tokens;
  base.kv_block_size = o.kv_block_size;
  base.max_batch_tokens = o.max_batch_tokens;
  base.max_seqs = o.max_seqs;
  base.max_context_tokens = o.max_context_tokens;
  base.gpu_memory_utilization = o.gpu_memory_utilization;
  MultiGpuOptions multi;
  multi.devices = std::move(devices);
  multi.tensor_parallel = tp;
  multi.pipeline_parallel = pp;
  auto executor = create_multi_gpu_executor(std::move(model), base, multi);
  EXPECT_TRUE(executor.is_ok()) << executor.status().to_string();
  return executor.is_ok() ? std::move(executor).value() : nullptr;
}

using gpu_testing::build;
using gpu_testing::kBlocksPerSeq;
using gpu_testing::opening_batches;
using gpu_testing::Rows;
using gpu_testing::run;
using gpu_testing::tokens;

using cuda::testing::max_rel_error;

// The same sequence of batches on both executors: a long prefill of two sequences (runs in
// pieces), a mixed batch (one decode row, one prefill chunk, a new sequence), then 12 greedy
// decode steps of three sequences (CUDA graph shapes).
void expect_same_as_single(std::shared_ptr<const LoadedModel> model,
                           std::unique_ptr<Executor> parallel, double tolerance) {
  auto single = make(model, small("0", 1, 1));
  ASSERT_TRUE(single && parallel);
  EXPECT_EQ(parallel->kv_info().n_blocks, single->kv_info().n_blocks);
  const int64_t n_vocab = model->config.n_vocab;
  for (const Batch& b : opening_batches(n_vocab)) {
    const auto want = run(*single, b);
    const auto got = run(*parallel, b);
    EXPECT_LE(max_rel_error(got, want, n_vocab), tolerance) << parallel->describe();
  }
  std::vector<int32_t> next = {0, 0, 0};
  std::vector<int32_t> length = {91, 50, 17};
  for (int step = 0; step < 12; ++step) {
    std::vector<Rows> rows;
    for (int32_t s = 0; s < 3; ++s)
      rows.push_back({s, {next[static_cast<size_t>(s)]}, length[static_cast<size_t>(s)]});
    const Batch b = build(rows, 3);
    const auto want = run(*single, b);
    const auto got = run(*parallel, b);
    EXPECT_LE(max_rel_error(got, want, n_vocab), tolerance) << "step " << step;
    for (int32_t s = 0; s < 3; ++s) {
      const auto row = want.begin() + static_cast<std::ptrdiff_t>(s * n_vocab);
      const auto got_row = got.begin() + static_cast<std::ptrdiff_t>(s * n_vocab);
      const int32_t greedy = static_cast<int32_t>(std::max_element(row, row + n_vocab) - row);
      // The same greedy token wherever the top two are further apart than the tolerance.
      std::vector<float> sorted(row, row + n_vocab);
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
      const double scale =
          std::max(std::fabs(sorted.front()), std::fabs(*std::min_element(row, row + n_vocab)));
      if (sorted[0] - sorted[1] > 4 * tolerance * scale) {
        EXPECT_EQ(static_cast<int32_t>(std::max_element(got_row, got_row + n_vocab) - got_row),
                  greedy)
            << "step " << step << " sequence " << s;
      }
      next[static_cast<size_t>(s)] = greedy;
      ++length[static_cast<size_t>(s)];
    }
  }
}

void expect_same_as_single(std::shared_ptr<const LoadedModel> model, const ExecutorOptions& multi,
                           double tolerance) {
  auto parallel = make(model, multi);
  expect_same_as_single(std::move(model), std::move(parallel), tolerance);
}

// Tolerances: the residual stream is summed in another order (residual + p0 + p1 instead of
// residual + p), float rounding that the next layers carry on. Measured on the H200s: F16
// 1.04e-3 with fp32 sums, 2.8e-3 with the default half sums of the prompts' GEMM partials
// (each partial rounded to f16 once more, as the GEMM's inputs are); Q8_0 1.2e-2, where an
// element that lands on the other side of an 8-bit rounding step of the next input moves it
// by 1/127 of its block. A wrong shard or a missing reduce is off by the size of the logits
// themselves.
constexpr double kF16FloatSums = 2e-3;
constexpr double kF16 = 4e-3;

TEST_F(MultiGpuTest, TensorParallelF16MatchesOneGpu) {
  auto model = load(source_dir() / "tests" / "fixtures" / "reference" / "tiny-llama-f16.gguf");
  ASSERT_NE(model, nullptr);
  expect_same_as_single(model, small("0,1", 2, 1), kF16);
}

// Prompt passes of 256 rows or more run on each tensor-parallel rank in two halves, one half's
// all-reduce overlapping the other's products: the same logits as with the halves off and as
// one GPU, for one long prompt (an odd row count), two prompts split across the halves, a chunk
// after cached positions, and the decode steps that follow (whole passes again); F16 and Q8_0.
TEST_F(MultiGpuTest, TensorParallelPromptHalvesMatchOneGpu) {
  // The overlapped halves all-reduce the residual stream in fp32 through NCCL; so do the whole
  // passes here (the same sums in the same order).
  setenv("LLAMASERVE_TP_GEMM_SUMS", "float", 1);
  setenv("LLAMASERVE_TP_ALLREDUCE", "nccl", 1);
  for (const auto& [model, tolerance] :
       {std::pair{load(source_dir() / "tests" / "fixtures" / "reference" / "tiny-llama-f16.gguf"),
                  kF16FloatSums},
        std::pair{tiny_q8_0(), 2.5e-2}}) {
    ASSERT_NE(model, nullptr);
    const int64_t n_vocab = model->config.n_vocab;
    auto make_tp = [&](int tp, bool overlap) {
      CudaExecutorOptions base;
      base.kv_capacity_tokens = 3 * 32 * 16;
      base.max_batch_tokens = 512;
      base.max_seqs = 16;
      base.max_context_tokens = 512;
      base.overlap_all_reduce = overlap;
      MultiGpuOptions multi;
      multi.devices = tp == 2 ? std::vector<int>{0, 1} : std::vector<int>{0};
      multi.tensor_parallel = tp;
      auto executor = tp == 2 ? create_multi_gpu_executor(model, base, multi)
                              : create_cuda_executor(model, base);
      EXPECT_TRUE(executor.is_ok()) << executor.status().to_string();
      return executor.is_ok() ? std::move(executor).value() : nullptr;
    };
    auto single = make_tp(1, false);
    auto halves = make_tp(2, true);
    auto whole = make_tp(2, false);
    ASSERT_TRUE(single && halves && whole);
    const std::vector<Batch> passes = {
        build({{0, tokens(301, n_vocab, 1), 0}}, 1),
        build({{0, {6}, 301}, {1, tokens(140, n_vocab, 2), 0}, {2, tokens(200, n_vocab, 3), 0}}, 3),
        build(
            {{0, tokens(180, n_vocab, 4), 302}, {1, tokens(100, n_vocab, 5), 140}, {2, {10}, 200}},
            3),
        build({{0, {7}, 482}, {1, {8}, 240}, {2, {9}, 201}}, 3)};
    for (size_t i = 0; i < passes.size(); ++i) {
      const auto want = run(*single, passes[i]);
      const auto got = run(*halves, passes[i]);
      EXPECT_LE(max_rel_error(got, want, n_vocab), tolerance) << "pass " << i;
      // The same shards and sums, only the rows' order of work differs.
      EXPECT_LE(max_rel_error(got, run(*whole, passes[i]), n_vocab), 1e-4) << "pass " << i;
    }
  }
  unsetenv("LLAMASERVE_TP_GEMM_SUMS");
  unsetenv("LLAMASERVE_TP_ALLREDUCE");
}

// Each way of summing the ranks' partials (LLAMASERVE_TP_ALLREDUCE): fused into the decode
// matvecs (the default; the prompt passes' GEMMs through NCCL), the one-kernel peer all-reduce
// for small tensors, NCCL alone. The decode steps of expect_same_as_single have 3 rows: matvecs.
TEST_F(MultiGpuTest, TensorParallelThroughEachWayOfSummingMatchesOneGpu) {
  auto model = load(source_dir() / "tests" / "fixtures" / "reference" / "tiny-llama-f16.gguf");
  ASSERT_NE(model, nullptr);
  for (const char* mode : {"fused", "peer", "nccl"}) {
    SCOPED_TRACE(mode);
    setenv("LLAMASERVE_TP_ALLREDUCE", mode, 1);
    auto parallel = make(model, small("0,1", 2, 1));
    ASSERT_NE(parallel, nullptr);
    const std::string described = parallel->describe();
    EXPECT_EQ(described.find("fused into the decode products") != std::string::npos,
              std::string_view(mode) == "fused")
        << described;
    EXPECT_EQ(described.find("peer-to-peer up to") != std::string::npos,
              std::string_view(mode) == "peer")
        << described;
    expect_same_as_single(model, std::move(parallel), kF16);
  }
  setenv("LLAMASERVE_TP_ALLREDUCE", "bogus", 1);
  auto refused = create_executor(model, small("0,1", 2, 1));
  unsetenv("LLAMASERVE_TP_ALLREDUCE");
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("expected fused, peer or nccl"), std::string::npos)
      << refused.status().to_string();
}

// The partials of GEMM output projections (prompts here) summed as halves (the default) or
// as fp32 (LLAMASERVE_TP_GEMM_SUMS): halves round each partial once more, 2^-11 of it.
TEST_F(MultiGpuTest, TensorParallelGemmSumsInHalfOrFloatMatchOneGpu) {
  auto model = load(source_dir() / "tests" / "fixtures" / "reference" / "tiny-llama-f16.gguf");
  ASSERT_NE(model, nullptr);
  for (const char* mode : {"half", "float"}) {
    SCOPED_TRACE(mode);
    setenv("LLAMASERVE_TP_GEMM_SUMS", mode, 1);
    auto parallel = make(model, small("0,1", 2, 1));
    ASSERT_NE(parallel, nullptr);
    const std::string described = parallel->describe();
    EXPECT_EQ(described.find("summed as halves") != std::string::npos,
              std::string_view(mode) == "half")
        << described;
    expect_same_as_single(model, std::move(parallel),
                          std::string_view(mode) == "half" ? kF16 : kF16FloatSums);
  }
  setenv("LLAMASERVE_TP_GEMM_SUMS", "bogus", 1);
  auto refused = create_executor(model, small("0,1", 2, 1));
  unsetenv("LLAMASERVE_TP_GEMM_SUMS");
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("expected half or float"), std::string::npos)
      << refused.status().to_string();
}

TEST_F(MultiGpuTest, TensorParallelQ8_0MatchesOneGpu) {
  auto model = tiny_q8_0();
  ASSERT_NE(model, nullptr);
  // Each rank quantizes only its own slice of the attention and FFN outputs to 8 bits: the
  // blocks are the same, the sums come in another order (see the tolerances above).
  expect_same_as_single(model, small("0,1", 2, 1), 2.5e-2);
}

// Tokens drawn on the device of the last stage's primary rank: what the sampling kernel draws
// from the logits the pass returns, for tp 2, pp 2 and tp 2 x pp 2, on a batch that runs in
// pieces and on graph-replayed decode steps.
TEST_F(MultiGpuTest, DeviceSamplingOnEveryLayout) {
  auto model = tiny_q8_0();
  ASSERT_NE(model, nullptr);
  const int64_t n_vocab = model->config.n_vocab;
  std::vector<std::unique_ptr<Executor>> layouts;
  layouts.push_back(make(model, small("0,1", 2, 1)));
  layouts.push_back(make(model, small("0,1", 1, 2)));
  layouts.push_back(make(model, micro_batched(small("0,1", 1, 2))));
  layouts.push_back(make_layout(model, {0, 1, 0, 1}, 2, 2));
  for (auto& ex : layouts) {
    ASSERT_NE(ex, nullptr);
    EXPECT_TRUE(ex->samples_on_device()) << ex->describe();
    std::vector<Batch> batches;
    batches.push_back(build({{0, tokens(90, n_vocab, 1), 0}, {1, tokens(41, n_vocab, 2), 0}}, 2));
    for (int32_t step = 0; step < 3; ++step) {
      batches.push_back(build({{0, {static_cast<int32_t>(7 + step)}, 90 + step},
                               {1, {static_cast<int32_t>(9 + step)}, 41 + step}},
                              2));
    }
    for (size_t b = 0; b < batches.size(); ++b) {
      const Batch& batch = batches[b];
      const size_t n = batch.logit_rows.size();
      std::vector<RowSampling> params(n);
      for (size_t i = 1; i < n; i += 2) {
        params[i].temperature = 0.8f;
        params[i].top_k = 30;
        params[i].seed = 40 + i;
        params[i].offset = b;
      }
      std::vector<float> logits(n * n_vocab, NAN);
      std::vector<int32_t> drawn(n, -1);
      ASSERT_OK(ex->forward_sampled(batch, params, drawn, logits));
      cuda::testing::DeviceArray<float> logits_dev(logits);
      cuda::testing::DeviceArray<RowSampling> params_dev(params);
      cuda::testing::DeviceArray<int32_t> want(n);
      ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
      ASSERT_OK(cuda::sample_tokens(logits_dev.get(), n_vocab, static_cast<int64_t>(n), n_vocab,
                                    params_dev.get(), want.get(), nullptr));
      EXPECT_EQ(drawn, want.download()) << ex->describe() << ", batch " << b;
      for (size_t i = 0; i < n; i += 2) {
        const float* row = logits.data() + i * n_vocab;
        EXPECT_EQ(drawn[i], std::max_element(row, row + n_vocab) - row) << "row " << i;
      }
    }
  }
}

// Same kernels, same order: the stages only move the rows between devices.
TEST_F(MultiGpuTest, PipelineMatchesOneGpuExactly) {
  auto q8 = tiny_q8_0();  // 4 layers: 2 + 2 balanced, then 1 + 3 on the devices reversed
  ASSERT_NE(q8, nullptr);
  expect_same_as_single(q8, small("0,1", 1, 2), 1e-6);
  ExecutorOptions split = small("1,0", 1, 2);
  split.layer_split = {1, 3};
  expect_same_as_single(q8, split, 1e-6);
  auto f16 = load(source_dir() / "tests" / "fixtures" / "reference" / "tiny-llama-f16.gguf");
  ASSERT_NE(f16, nullptr);
  expect_same_as_single(f16, small("0,1", 1, 2), 1e-6);
}

// tp 2 x pp 2: the tensor-parallel tolerances (the pipeline adds no rounding of its own). On
// "0,1,0,1" each device holds one rank of each stage, two NCCL communicators over the same
// pair of GPUs, used one stage after the other.
TEST_F(MultiGpuTest, TensorTimesPipelineF16MatchesOneGpu) {
  auto model = load(source_dir() / "tests" / "fixtures" / "reference" / "tiny-llama-f16.gguf");
  ASSERT_NE(model, nullptr);
  auto parallel = make_layout(model, {0, 1, 0, 1}, 2, 2);
  ASSERT_NE(parallel, nullptr);
  EXPECT_NE(parallel->describe().find("pipeline of 2 stages, each tensor parallel over 2 GPUs"),
            std::string::npos)
      << parallel->describe();
  expect_same_as_single(model, std::move(parallel), kF16);
  // Four distinct GPUs, through the server's path, where the machine has them.
  if (device_count() >= 4) expect_same_as_single(model, small("0,1,2,3", 2, 2), kF16);
}

TEST_F(MultiGpuTest, TensorTimesPipelineQ8_0MatchesOneGpu) {
  auto model = tiny_q8_0();
  ASSERT_NE(model, nullptr);
  expect_same_as_single(model, make_layout(model, {0, 1, 0, 1}, 2, 2), 2.5e-2);
  // The stages on the devices the other way round: stage 1 reads stage 0's primary on cuda:1.
  expect_same_as_single(model, make_layout(model, {1, 0, 1, 0}, 2, 2), 2.5e-2);
}

// pp 2 on "0,1" with small()'s limits, KV blocks for six sequences, up to `micro_batches` in
// flight (1: the stages in turn) from one row each, and every product through the matvec
// kernels: their rows do not depend on the pass's other rows (cuBLAS may choose another
// kernel, and another summation order, for another row count), so a micro-batched pass must
// give exactly the logits of the whole pass.
std::unique_ptr<Executor> make_row_exact_pipeline(std::shared_ptr<const LoadedModel> model,
                                                  int32_t micro_batches) {
  const ExecutorOptions o = small("0,1", 1, 2);
  CudaExecutorOptions base;
  base.kv_capacity_tokens = 6 * kBlocksPerSeq * o.kv_block_size;
  base.kv_block_size = o.kv_block_size;
  base.max_batch_tokens = o.max_batch_tokens;
  base.max_seqs = o.max_seqs;
  base.max_context_tokens = o.max_context_tokens;
  base.gpu_memory_utilization = o.gpu_memory_utilization;
  base.gemm_min_rows = base.float_gemm_min_rows = o.max_batch_tokens + 1;
  MultiGpuOptions multi;
  multi.devices = {0, 1};
  multi.pipeline_parallel = 2;
  multi.pipeline_micro_batches = micro_batches;
  multi.micro_batch_min_rows = 1;
  auto executor = create_multi_gpu_executor(std::move(model), base, multi);
  EXPECT_TRUE(executor.is_ok()) << executor.status().to_string();
  return executor.is_ok() ? std::move(executor).value() : nullptr;
}

// Micro-batches in flight against the same pipeline with the stages in turn: a prefill of six
// sequences (58 rows: two micro-batches of three sequences), their next chunks (144 rows: the
// pass in turn runs in pieces of 64 rows, each micro-batch in its own pieces, cut elsewhere),
// then 10 decode steps of six rows (micro-batches of three decode rows, replayed from CUDA
// graphs). Every other row draws its token at a temperature, the rest greedily: the same
// logits, exactly, and the same tokens.
TEST_F(MultiGpuTest, PipelineMicroBatchesMatchTheStagesInTurn) {
  auto model = tiny_q8_0();
  ASSERT_NE(model, nullptr);
  auto in_turn = make_row_exact_pipeline(model, 1);
  auto in_flight = make_row_exact_pipeline(model, 2);
  ASSERT_TRUE(in_turn && in_flight);
  EXPECT_NE(in_flight->describe().find("up to 2 micro-batches in flight"), std::string::npos)
      << in_flight->describe();
  EXPECT_NE(in_turn->describe().find("micro-batches off"), std::string::npos)
      << in_turn->describe();
  const int64_t n_vocab = model->config.n_vocab;
  constexpr int32_t kSeqs = 6;
  uint64_t step = 0;
  // Both executors run `batch`; returns the tokens drawn (the in-turn executor's).
  auto run_both = [&](const Batch& batch, const std::string& what) {
    const size_t n = batch.logit_rows.size();
    std::vector<RowSampling> params(n);
    for (size_t i = 1; i < n; i += 2) {
      params[i].temperature = 0.9f;
      params[i].top_k = 40;
      params[i].seed = 7 + i;
      params[i].offset = step;
    }
    ++step;
    std::vector<float> want(n * n_vocab, NAN), got(n * n_vocab, NAN);
    std::vector<int32_t> want_tokens(n, -1), got_tokens(n, -2);
    const Status a = in_turn->forward_sampled(batch, params, want_tokens, want);
    const Status b = in_flight->forward_sampled(batch, params, got_tokens, got);
    EXPECT_TRUE(a.is_ok()) << a.to_string();
    EXPECT_TRUE(b.is_ok()) << b.to_string();
    EXPECT_LE(max_rel_error(got, want, n_vocab), 1e-6) << what;
    EXPECT_EQ(got_tokens, want_tokens) << what;
    return want_tokens;
  };

  const std::vector<int32_t> first = {9, 14, 5, 11, 7, 12};
  constexpr int32_t kChunk = 24;
  std::vector<Rows> rows;
  for (int32_t s = 0; s < kSeqs; ++s)
    rows.push_back({s, tokens(first[static_cast<size_t>(s)], n_vocab, 10 + s), 0});
  run_both(build(rows, kSeqs), "prefill");
  rows.clear();
  for (int32_t s = 0; s < kSeqs; ++s)
    rows.push_back({s, tokens(kChunk, n_vocab, 20 + s), first[static_cast<size_t>(s)]});
  const std::vector<int32_t> drawn = run_both(build(rows, kSeqs), "second chunks");
  ASSERT_EQ(drawn.size(), static_cast<size_t>(kSeqs * kChunk));

  std::vector<int32_t> next, length;
  for (int32_t s = 0; s < kSeqs; ++s) {
    next.push_back(drawn[static_cast<size_t>((s + 1) * kChunk - 1)]);
    length.push_back(first[static_cast<size_t>(s)] + kChunk);
  }
  for (int d = 0; d < 10; ++d) {
    rows.clear();
    for (int32_t s = 0; s < kSeqs; ++s)
      rows.push_back({s, {next[static_cast<size_t>(s)]}, length[static_cast<size_t>(s)]++});
    next = run_both(build(rows, kSeqs), "decode step " + std::to_string(d));
    ASSERT_EQ(next.size(), static_cast<size_t>(kSeqs));
  }
  // Every pass (two prefills, ten decode steps) ran as two micro-batches; none in turn did.
  EXPECT_EQ(pipeline_counters(*in_flight).passes, 12u);
  EXPECT_EQ(pipeline_counters(*in_flight).micro_batches, 24u);
  EXPECT_EQ(pipeline_counters(*in_turn).passes, 0u);
}

// A device in two stages: the stages take turns (NCCL communicators sharing a device must not
// run at once), whatever the micro-batch option says.
TEST_F(MultiGpuTest, MicroBatchesStayOffWhereADeviceServesTwoStages) {
  auto model = tiny_q8_0();
  ASSERT_NE(model, nullptr);
  const ExecutorOptions o = small("0", 2, 2);
  CudaExecutorOptions base;
  base.kv_capacity_tokens = o.kv_capacity_tokens;
  base.max_batch_tokens = o.max_batch_tokens;
  base.max_seqs = o.max_seqs;
  base.max_context_tokens = o.max_context_tokens;
  MultiGpuOptions multi;
  multi.devices = {0, 1, 0, 1};
  multi.tensor_parallel = 2;
  multi.pipeline_parallel = 2;
  multi.pipeline_micro_batches = 2;
  multi.micro_batch_min_rows = 1;
  auto executor = create_multi_gpu_executor(model, base, multi);
  ASSERT_TRUE(executor.is_ok()) << executor.status().to_string();
  EXPECT_NE((*executor)->describe().find("micro-batches off: cuda:0 serves two stages"),
            std::string::npos)
      << (*executor)->describe();
  const int64_t n_vocab = model->config.n_vocab;
  const Batch batch = build(
      {{0, tokens(5, n_vocab, 1), 0}, {1, tokens(6, n_vocab, 2), 0}, {2, tokens(7, n_vocab, 3), 0}},
      3);
  run(**executor, batch);
  EXPECT_EQ(pipeline_counters(**executor).passes, 0u);
  multi.pipeline_micro_batches = -1;
  const Status bad = create_multi_gpu_executor(model, base, multi).status();
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("pipeline micro-batches = -1 must be in [0, 64]"), std::string::npos)
      << bad.message();
}

// A LLaMA-2-7B-shaped model (32 layers, 4096 wide; `llamaserve synth`, F16) when
// LLAMASERVE_TEST_7B names one: tensor parallel and pipeline against one GPU.
TEST_F(MultiGpuTest, SevenBShapeLayoutsMatchOneGpu) {
  const char* path = std::getenv("LLAMASERVE_TEST_7B");
  if (path == nullptr || !fs::exists(path))
    GTEST_SKIP() << "set LLAMASERVE_TEST_7B to a 7B-shaped GGUF";
  auto model = load(path);
  ASSERT_NE(model, nullptr);
  expect_same_as_single(model, small("0,1", 1, 2), 1e-6);
  // 32 layers of reordered float sums: a few 1e-3 of the largest logit.
  expect_same_as_single(model, small("0,1", 2, 1), 1e-2);
}

// The real SmolLM2-135M-Instruct (Q4_1, 30 layers, 9 heads over 3 KV heads; models/ of the
// source tree, as scripts/setup.sh fetches it) when present: pp=2 gives one GPU's logits and
// greedy tokens, tensor parallelism is refused with the sizes its 3 KV heads allow, and a group
// of two one-GPU replicas answers chat prompts with the one GPU's greedy tokens on either
// replica, and spreads them when they come all at once. LLAMASERVE_REQUIRE_SMOLLM2 makes a missing
// file a failure.
TEST_F(MultiGpuTest, SmolLM2UnderPipelineAndReplicasMatchesOneGpu) {
  const fs::path path = source_dir() / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!fs::exists(path)) {
    if (std::getenv("LLAMASERVE_REQUIRE_SMOLLM2") != nullptr) FAIL() << path << " is missing";
    GTEST_SKIP() << path << " is missing";
  }
  auto model = load(path);
  ASSERT_NE(model, nullptr);
  expect_same_as_single(model, small("0,1", 1, 2), 1e-6);

  const Status tp = create_executor(model, small("0,1", 2, 1)).status();
  EXPECT_EQ(tp.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(tp.message().find("valid sizes for this model: 1, 3"), std::string::npos)
      << tp.message();

  auto file = GgufFile::open(path.string());
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  auto tokenizer = Tokenizer::from_gguf(**file);
  ASSERT_TRUE(tokenizer.is_ok()) << tokenizer.status().to_string();
  auto shared_tokenizer = std::make_shared<const Tokenizer>(std::move(tokenizer).value());
  auto engine_on = [&](const std::string& device) -> std::unique_ptr<Engine> {
    ExecutorOptions o = small(device, 1, 1);
    o.kv_capacity_tokens = 64 * 16;
    auto executor = make(model, o);
    if (executor == nullptr) return nullptr;
    EngineConfig config;
    config.max_running = 8;
    config.max_batch_tokens = 64;
    auto engine = Engine::create(std::move(executor), shared_tokenizer, config);
    EXPECT_TRUE(engine.is_ok()) << engine.status().to_string();
    return engine.is_ok() ? std::move(engine).value() : nullptr;
  };
  std::vector<std::unique_ptr<Engine>> replicas;
  replicas.push_back(engine_on("0"));
  replicas.push_back(engine_on("1"));
  auto single = engine_on("0");
  ASSERT_TRUE(replicas[0] && replicas[1] && single);
  auto group = EngineGroup::create(std::move(replicas));
  ASSERT_TRUE(group.is_ok()) << group.status().to_string();

  const std::vector<std::string> prompts = {
      "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
      "<|im_start|>user\nWrite a haiku about the sea.<|im_end|>\n<|im_start|>assistant\n",
      "<|im_start|>user\nList three prime numbers.<|im_end|>\n<|im_start|>assistant\n",
      "<|im_start|>user\nSay hello in Spanish.<|im_end|>\n<|im_start|>assistant\n"};
  auto request_for = [&](const std::string& prompt) {
    GenerationRequest r;
    r.prompt_tokens = shared_tokenizer->encode(prompt, false, true);
    r.max_new_tokens = 24;
    r.ignore_eos = true;
    r.sampling.temperature = 0.0f;
    return r;
  };
  auto tokens_of = [](RequestHandle& handle) {
    std::vector<int32_t> out;
    while (auto event = handle.next(std::chrono::seconds(60))) {
      out.insert(out.end(), event->tokens.begin(), event->tokens.end());
      if (event->kind == GenerationEvent::Kind::kFinish) {
        EXPECT_TRUE(event->error.is_ok()) << event->error.to_string();
      }
    }
    return out;
  };
  std::vector<std::vector<int32_t>> want;
  for (const std::string& prompt : prompts) {
    auto one = single->submit(request_for(prompt));
    ASSERT_TRUE(one.is_ok()) << one.status().to_string();
    want.push_back(tokens_of(*one));
    ASSERT_EQ(want.back().size(), 24u);
    // Each replica in turn (the idle router would pick replica 0 every time).
    auto routed = (*group)->submit_to(want.size() % 2, request_for(prompt));
    ASSERT_TRUE(routed.is_ok()) << routed.status().to_string();
    EXPECT_EQ(tokens_of(*routed), want.back()) << prompt;
  }
  // All at once: the router spreads them over both GPUs. (Concurrent sequences share steps whose
  // make-up may take other kernels, matvec or GEMM by row count, so only the counts are compared.)
  std::vector<RequestHandle> handles;
  for (const std::string& prompt : prompts) {
    auto handle = (*group)->submit(request_for(prompt));
    ASSERT_TRUE(handle.is_ok()) << handle.status().to_string();
    handles.push_back(std::move(handle).value());
  }
  for (size_t i = 0; i < handles.size(); ++i) {
    EXPECT_EQ(tokens_of(handles[i]).size(), 24u) << prompts[i];
  }
  EXPECT_GT((*group)->replica_stats(0).steps_total, 0u);
  EXPECT_GT((*group)->replica_stats(1).steps_total, 0u);
}

TEST_F(MultiGpuTest, InvalidLayoutsAreRefusedClearly) {
  // One KV head: no tensor-parallel split but 1.
  auto gqa = load(source_dir() / "tests" / "fixtures" / "reference" / "tiny-gqa-q8_0.gguf");
  ASSERT_NE(gqa, nullptr);
  const Status tp = create_executor(gqa, small("0,1", 2, 1)).status();
  EXPECT_EQ(tp.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(tp.message().find("valid sizes for this model: 1"), std::string::npos) << tp.message();
  ExecutorOptions bad_split = small("0,1", 1, 2);
  bad_split.layer_split = {2, 1};
  const Status split = create_executor(gqa, bad_split).status();
  EXPECT_NE(split.message().find("adds up to 3 layers; the model has 2"), std::string::npos)
      << split.message();
  EXPECT_FALSE(create_executor(gqa, small("0,7", 1, 2)).is_ok());
  EXPECT_FALSE(create_executor(gqa, small("0,1", 2, 2)).is_ok());  // 4 devices needed
  // tp x pp: the tensor-parallel check holds for every stage, and a stage's ranks need
  // distinct devices (one NCCL communicator each).
  MultiGpuOptions both;
  both.devices = {0, 1, 0, 1};
  both.tensor_parallel = 2;
  both.pipeline_parallel = 2;
  const Status shard = create_multi_gpu_executor(gqa, CudaExecutorOptions(), both).status();
  EXPECT_NE(shard.message().find("valid sizes for this model: 1"), std::string::npos)
      << shard.message();
  both.devices = {0, 0, 1, 1};
  const Status twice = create_multi_gpu_executor(gqa, CudaExecutorOptions(), both).status();
  EXPECT_EQ(twice.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(twice.message().find("pipeline stage 0 (devices 0,0) has cuda:0 twice"),
            std::string::npos)
      << twice.message();
}

// An engine on each layout (tp 2, pp 2 with the stages in turn and with micro-batches in flight,
// tp 2 x pp 2): 24 concurrent requests, a third cancelled mid-stream; afterwards every KV block is
// free, and once the engine is gone the devices have their memory back.
TEST_F(MultiGpuTest, EngineLoadWithCancellationsLeavesNothingBehind) {
  auto model = tiny_q8_0();
  ASSERT_NE(model, nullptr);
  auto vocab = GgufFile::open(vocab_path());
  ASSERT_TRUE(vocab.is_ok()) << vocab.status().to_string();
  auto tokenizer = Tokenizer::from_gguf(**vocab);
  ASSERT_TRUE(tokenizer.is_ok()) << tokenizer.status().to_string();
  auto shared_tokenizer = std::make_shared<const Tokenizer>(std::move(tokenizer).value());
  // Each layout twice: the first cycle may leave what the CUDA runtime and NCCL keep for
  // the process (contexts, peer mappings); the second must give back all it took.
  size_t free_after_first[2] = {0, 0};
  int cycle = 0;
  for (const auto& [tp, pp, micro] :
       {std::tuple{2, 1, false}, std::tuple{2, 1, false}, std::tuple{1, 2, false},
        std::tuple{1, 2, false}, std::tuple{1, 2, true}, std::tuple{1, 2, true},
        std::tuple{2, 2, false}, std::tuple{2, 2, false}}) {
    const bool second = cycle++ % 2 == 1;
    size_t total;
    {
      ExecutorOptions o = micro ? micro_batched(small("0,1", tp, pp)) : small("0,1", tp, pp);
      o.kv_capacity_tokens = 128 * 16;
      // tp 2 x pp 2 on the two GPUs: one rank of each stage on each.
      auto executor = tp * pp == 4 ? make_layout(model, {0, 1, 0, 1}, tp, pp, o.kv_capacity_tokens)
                                   : make(model, o);
      ASSERT_NE(executor, nullptr);
      const Executor* executor_seen = executor.get();  // the engine owns it from here
      EngineConfig config;
      config.max_running = 8;
      config.max_waiting = 64;
      config.max_batch_tokens = 64;
      auto engine = Engine::create(std::move(executor), shared_tokenizer, config);
      ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
      std::vector<RequestHandle> handles;
      for (int i = 0; i < 24; ++i) {
        GenerationRequest request;
        request.prompt_tokens = tokens(5 + 3 * i, model->config.n_vocab, i);
        request.max_new_tokens = 24;
        request.ignore_eos = true;
        request.sampling.temperature = 0.0f;
        auto handle = (*engine)->submit(request);
        ASSERT_TRUE(handle.is_ok()) << handle.status().to_string();
        handles.push_back(std::move(handle).value());
      }
      int finished = 0;
      for (size_t i = 0; i < handles.size(); ++i) {
        bool cancelled = false;
        while (auto event = handles[i].next(std::chrono::seconds(120))) {
          if (i % 3 == 0 && !cancelled) {
            handles[i].cancel();
            cancelled = true;
          }
          if (event->kind == GenerationEvent::Kind::kFinish) {
            ++finished;
            EXPECT_TRUE(event->error.is_ok() || event->finish_reason == FinishReason::kCancelled)
                << event->error.to_string();
          }
        }
      }
      EXPECT_EQ(finished, 24);
      for (int i = 0;
           i < 200 && (*engine)->stats().kv_blocks_free != (*engine)->stats().kv_blocks_total;
           ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      EXPECT_EQ((*engine)->stats().kv_blocks_free, (*engine)->stats().kv_blocks_total)
          << "tp " << tp << " pp " << pp << (micro ? " micro-batched" : "");
      // Up to 8 running sequences: decode steps and mixed steps of several sequences split.
      if (micro) {
        EXPECT_GT(pipeline_counters(*executor_seen).passes, 0u);
      }
    }
    for (int d = 0; d < 2; ++d) {
      size_t free_after;
      ASSERT_EQ(cudaSetDevice(d), cudaSuccess);
      ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
      if (!second) {
        free_after_first[d] = free_after;
      } else {
        // The pools are 70 MB per device here; allow for allocator granularity only.
        EXPECT_GE(free_after + (8ull << 20), free_after_first[d])
            << "device " << d << " tp " << tp << " pp " << pp << (micro ? " micro-batched" : "");
      }
    }
  }
}

}  // namespace
}  // namespace llamaserve
