// Pipelines against one GPU: pp=2 (balanced and an explicit split) gives exactly one GPU's
// logits, tp=2 x pp=2 (on "0,1,0,1" where only two GPUs exist) within the tensor-parallel
// tolerance, and micro-batches in flight exactly what the stages in turn give, except where a
// device serves two stages (they stay off there). Skips below 2 GPUs.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "executor/cuda_executor.h"
#include "parallel/multi_gpu_executor.h"

#include "multi_gpu_util.h"

namespace llamaserve {
namespace {

using namespace multi_gpu_testing;

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

}  // namespace
}  // namespace llamaserve
