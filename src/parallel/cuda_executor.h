// The single-GPU executor: one CudaBackend running every layer on one device, with the weights,
// the paged KV cache, the activations and the workspace in one device pool sized by a memory
// plan. Decode steps (every sequence contributes one row) are captured as CUDA graphs, one per
// padded batch size and attention split, and replayed. Built only with LLAMASERVE_CUDA.
#pragma once

#include <cstdint>
#include <memory>

#include "core/status.h"
#include "model/weights.h"
#include "parallel/executor.h"

namespace llamaserve {

struct CudaExecutorOptions {
  int device = 0;
  // Fraction of the device's memory this instance may use, counting what other processes
  // already use against it.
  double gpu_memory_utilization = 0.90;
  int64_t kv_capacity_tokens = 0;   // 0: all the memory the budget leaves
  int32_t kv_block_size = 16;       // tokens per KV block
  int32_t max_batch_tokens = 2048;  // rows per forward pass; larger batches run in pieces
  int32_t max_seqs = 256;           // sequences per forward pass
  int64_t max_context_tokens = 0;   // longest sequence; 0: the model's n_ctx_train
  int32_t gemm_min_rows = 32;       // products with this many rows or more use cuBLAS
  bool cuda_graphs = true;
};

Result<std::unique_ptr<Executor>> create_cuda_executor(std::shared_ptr<const LoadedModel> model,
                                                       const CudaExecutorOptions& options);

}  // namespace llamaserve
