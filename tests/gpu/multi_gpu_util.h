// What the multi-GPU tests share (multi_gpu_*test.cc, one binary: multi_gpu_test): the
// fixture, a tiny synthetic Q8_0 model, small executor options, executors over an explicit
// device list, and the comparison of a multi-GPU executor with one GPU over prefill, mixed and
// decode batches.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "batch_builders.h"
#include "executor/executor.h"
#include "service/layout_factory.h"
#include "test_util.h"

namespace llamaserve::multi_gpu_testing {

namespace fs = std::filesystem;
using cuda::testing::device_count;
using cuda::testing::max_rel_error;
using cuda::testing::source_dir;
using cuda::testing::vocab_path;
using gpu_testing::build;
using gpu_testing::kBlocksPerSeq;
using gpu_testing::opening_batches;
using gpu_testing::Rows;
using gpu_testing::run;
using gpu_testing::tokens;

class MultiGpuTest : public cuda::testing::TwoGpuTest {};

std::shared_ptr<const LoadedModel> load(const fs::path& path);

// A synthetic tiny Q8_0 model (4 heads, 2 KV heads, FFN 768: tp=2 divides it), made once.
std::shared_ptr<const LoadedModel> tiny_q8_0();

// Options for small test executors over `devices` (3 sequences of kBlocksPerSeq blocks,
// 64-row pieces, the pipeline's stages in turn).
ExecutorOptions small(const std::string& devices, int tp, int pp);

// small() with pipeline micro-batches in flight from one row per micro-batch.
ExecutorOptions micro_batched(ExecutorOptions o);

std::unique_ptr<Executor> make(std::shared_ptr<const LoadedModel> model, const ExecutorOptions& o);

// tp x pp over an explicit device list, with small()'s options: the server's device lists
// (create_executor) never repeat a device, but tp 2 x pp 2 on a 2-GPU machine is "0,1,0,1"
// (each stage's communicator still has distinct devices).
std::unique_ptr<Executor> make_layout(std::shared_ptr<const LoadedModel> model,
                                      std::vector<int> devices, int tp, int pp,
                                      int64_t kv_capacity_tokens = 3 * 32 * 16);

// The same sequence of batches on `parallel` and on one GPU: a long prefill of two sequences
// (runs in pieces), a mixed batch (one decode row, one prefill chunk, a new sequence), then 12
// greedy decode steps of three sequences (CUDA graph shapes); logits within `tolerance` of the
// one-GPU range, the same greedy tokens where the top two are further apart.
void expect_same_as_single(std::shared_ptr<const LoadedModel> model,
                           std::unique_ptr<Executor> parallel, double tolerance);
void expect_same_as_single(std::shared_ptr<const LoadedModel> model, const ExecutorOptions& multi,
                           double tolerance);

// Tolerances: the residual stream is summed in another order (residual + p0 + p1 instead of
// residual + p), float rounding that the next layers carry on. Measured on the H200s: F16
// 1.04e-3 with fp32 sums, 2.8e-3 with the default half sums of the prompts' GEMM partials
// (each partial rounded to f16 once more, as the GEMM's inputs are); Q8_0 1.2e-2, where an
// element that lands on the other side of an 8-bit rounding step of the next input moves it
// by 1/127 of its block. A wrong shard or a missing reduce is off by the size of the logits
// themselves.
inline constexpr double kF16FloatSums = 2e-3;
inline constexpr double kF16 = 4e-3;

}  // namespace llamaserve::multi_gpu_testing
