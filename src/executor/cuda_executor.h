// The single-GPU executor: one CudaBackend running every layer on one device, with the weights,
// the paged KV cache, the activations and the workspace in one device pool sized by a memory
// plan. Decode steps (every sequence contributes one row) are captured as CUDA graphs, one per
// padded batch size and attention split, and replayed. Built only with LLAMASERVE_CUDA.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include <functional>
#include <optional>

#include <cuda_runtime_api.h>

#include "backend/cuda/rank_sum.h"
#include "backend/kernel_tuning.h"
#include "backend/layer_range.h"
#include "core/status.h"
#include "executor/executor.h"
#include "model/weights.h"

namespace llamaserve {

struct CudaExecutorOptions {
  int device = 0;
  // Fraction of the device's memory this instance may use, counting what other processes
  // already use against it.
  double gpu_memory_utilization = 0.90;
  int64_t kv_capacity_tokens = 0;        // 0: all the memory the budget leaves
  int32_t kv_block_size = 16;            // tokens per KV block
  TensorType kv_type = TensorType::F16;  // F16 or Q8_0
  int32_t max_batch_tokens = 2048;       // rows per forward pass; larger batches run in pieces
  int32_t max_seqs = 256;                // sequences per forward pass
  int64_t max_context_tokens = 0;        // longest sequence; 0: the model's n_ctx_train
  int32_t gemm_min_rows = 5;             // products with this many rows or more are GEMMs (gemm.h)
  int32_t float_gemm_min_rows = 5;       // the same for F16/BF16/F32 weights
  bool cuda_graphs = true;
  // The kernels' settings (programmatic dependent launch; per-operation timing, which turns
  // CUDA graphs off).
  KernelTuning tuning;

  // Multi-GPU roles (multi_gpu_executor.h); the defaults make the whole-model executor.
  // A pipeline stage runs these layers only (embeddings and head where the range says).
  std::optional<LayerRange> layers;
  // A tensor-parallel rank: the model is its shard, and the partial sums of the attention output
  // and FFN down projections are summed over the ranks as this says (backend/cuda/rank_sum.h;
  // parallel/rank_sum.h makes them from TpSums). Only the primary rank adds the residual and
  // computes logits. Null: no ranks.
  std::shared_ptr<const cuda::RankSum> rank_sum;
  // A tensor-parallel rank runs prompt passes of at least 256 rows in two halves, each half's
  // all-reduce (RankSum::sum_hidden) on a second, high-priority stream while the other half
  // computes. Every rank of a group must agree (the NCCL calls differ). Off by default: on two
  // H200s with the 7B shape a 512-row prompt ran slower this way (31.2k against 38.3k tok/s:
  // the halves' GEMMs are less efficient, and the all-reduce's blocks wait for SMs the GEMMs
  // hold).
  bool overlap_all_reduce = false;
  // Reports the weight upload (GGUF bytes uploaded so far of this part's tensors).
  LoadProgressFn on_upload_progress;
};

Result<std::unique_ptr<Executor>> create_cuda_executor(std::shared_ptr<const LoadedModel> model,
                                                       const CudaExecutorOptions& options);

// Where a pipeline stage's input rows come from: the previous stage's hidden state, `rows`
// rows of `stride` floats at `data` on device `device`.
struct StageInput {
  const float* data = nullptr;
  int device = 0;
  int64_t stride = 0;
  int32_t rows = 0;
  // When set, run_piece calls it (on its own thread) once the rows are in its own buffer, before
  // it computes: the previous stage may overwrite them from then on (micro-batches in flight).
  std::function<void()> on_copied;
};

// One device's part of a multi-GPU executor: the single-GPU executor with a layer range or a
// tensor-parallel shard. Built in two phases so that every part can agree on one KV block
// count: plan_kv_blocks() on each, then init(blocks).
class CudaPart {
 public:
  static Result<std::unique_ptr<CudaPart>> create(std::shared_ptr<const LoadedModel> model,
                                                  const CudaExecutorOptions& options);
  virtual ~CudaPart() = default;

  // The KV blocks the memory budget of the device leaves (or the requested capacity).
  virtual Result<int32_t> plan_kv_blocks() = 0;
  // Allocates and uploads with exactly `kv_blocks` blocks.
  virtual Status init(int32_t kv_blocks) = 0;
  virtual Executor& executor() = 0;

  // Runs one piece of at most max_batch_tokens rows, taking the input rows from `input`
  // (stages after the first) and, in the part with the head, writing logits (unless null) and
  // drawing one token per logit row with `sampling` into `tokens` (unless empty; see
  // Executor::forward_sampled). Synchronous: the output rows are in output() when it returns.
  virtual Status run_piece(const Batch& piece, float* logits, const StageInput* input,
                           std::span<const RowSampling> sampling = {},
                           std::span<int32_t> tokens = {}) = 0;
  virtual StageInput output(int32_t rows) const = 0;
  // What this part's limits refuse of a whole batch before anything runs (a sequence longer
  // than max_context_tokens: kOutOfRange; more sequences than max_seqs: kInvalidArgument), for
  // executors of several parts to check up front.
  virtual Status check_batch(const Batch& batch) const = 0;
};

}  // namespace llamaserve
