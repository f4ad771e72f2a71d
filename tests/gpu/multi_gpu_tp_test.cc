// Tensor parallelism against one GPU: tp=2 on F16 and Q8_0 models (logits of prefill, mixed
// and oversized batches, greedy tokens step by step with CUDA graphs), through each way of
// summing the partials (fused, peer, NCCL; half or fp32 GEMM partials), the prompt in two
// halves; and tokens drawn on the device on every layout. Skips below 2 GPUs.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backend/cuda/sampling.h"
#include "executor/cuda_executor.h"
#include "executor/executor_factory.h"
#include "executor/tp_sums.h"
#include "parallel/multi_gpu_executor.h"

#include "multi_gpu_util.h"

namespace llamaserve {
namespace {

using namespace multi_gpu_testing;

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
      multi.tp_sums = {TpSumMode::kNccl, /*half_gemm_sums=*/false};
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
}

// Each way of summing the ranks' partials (ExecutorOptions::tp_sums): fused into the decode
// matvecs (the default; the prompt passes' GEMMs through NCCL), the one-kernel peer all-reduce
// for small tensors, NCCL alone. The decode steps of expect_same_as_single have 3 rows: matvecs.
TEST_F(MultiGpuTest, TensorParallelThroughEachWayOfSummingMatchesOneGpu) {
  auto model = load(source_dir() / "tests" / "fixtures" / "reference" / "tiny-llama-f16.gguf");
  ASSERT_NE(model, nullptr);
  for (const TpSumMode mode : {TpSumMode::kFused, TpSumMode::kPeer, TpSumMode::kNccl}) {
    SCOPED_TRACE(tp_sum_mode_name(mode));
    ExecutorOptions options = small("0,1", 2, 1);
    options.tp_sums.mode = mode;
    auto parallel = make(model, options);
    ASSERT_NE(parallel, nullptr);
    const std::string described = parallel->describe();
    EXPECT_EQ(described.find("fused into the decode products") != std::string::npos,
              mode == TpSumMode::kFused)
        << described;
    EXPECT_EQ(described.find("peer-to-peer up to") != std::string::npos, mode == TpSumMode::kPeer)
        << described;
    expect_same_as_single(model, std::move(parallel), kF16);
  }
}

// The partials of GEMM output projections (prompts here) summed as halves (the default) or
// as fp32 (TpSums::half_gemm_sums): halves round each partial once more, 2^-11 of it.
TEST_F(MultiGpuTest, TensorParallelGemmSumsInHalfOrFloatMatchOneGpu) {
  auto model = load(source_dir() / "tests" / "fixtures" / "reference" / "tiny-llama-f16.gguf");
  ASSERT_NE(model, nullptr);
  for (const bool half : {true, false}) {
    SCOPED_TRACE(half ? "half" : "float");
    ExecutorOptions options = small("0,1", 2, 1);
    options.tp_sums.half_gemm_sums = half;
    auto parallel = make(model, options);
    ASSERT_NE(parallel, nullptr);
    const std::string described = parallel->describe();
    EXPECT_EQ(described.find("summed as halves") != std::string::npos, half) << described;
    expect_same_as_single(model, std::move(parallel), half ? kF16 : kF16FloatSums);
  }
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

}  // namespace
}  // namespace llamaserve
