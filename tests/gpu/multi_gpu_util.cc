#include "multi_gpu_util.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "executor/cuda_executor.h"
#include "model/importers/synth_model.h"
#include "parallel/multi_gpu_executor.h"

namespace llamaserve::multi_gpu_testing {

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
                                      int64_t kv_capacity_tokens) {
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

}  // namespace llamaserve::multi_gpu_testing
