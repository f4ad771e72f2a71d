// A model's weights on one device: the matrices in the device layout (device_matrix.h), norms
// and biases as fp32, and the RoPE frequencies. Uploaded once from the mmap'd GGUF into the
// device pool; plain views afterwards.
#pragma once

#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include "backend/cuda/device_matrix.h"
#include "backend/cuda/device_pool.h"
#include "backend/layer_range.h"
#include "core/status.h"
#include "model/weights.h"

namespace llamaserve::cuda {

struct CudaLayerWeights {
  const float* attn_norm = nullptr;  // (n_embd)
  DeviceMatrix wq;                   // (n_head * head_dim, n_embd)
  DeviceMatrix wk;                   // (n_head_kv * head_dim, n_embd)
  DeviceMatrix wv;                   // (n_head_kv * head_dim, n_embd)
  DeviceMatrix wo;                   // (n_embd, n_head * head_dim)
  const float* bq = nullptr;         // (n_head * head_dim) or null
  const float* bk = nullptr;         // (n_head_kv * head_dim) or null
  const float* bv = nullptr;         // (n_head_kv * head_dim) or null
  const float* ffn_norm = nullptr;   // (n_embd)
  DeviceMatrix w_gate;               // (n_ff, n_embd)
  DeviceMatrix w_up;                 // (n_ff, n_embd)
  DeviceMatrix w_down;               // (n_embd, n_ff)
};

struct CudaWeights {
  DeviceMatrix token_embd;               // (n_vocab, n_embd); only with range.embeddings
  std::vector<CudaLayerWeights> layers;  // indexed by layer - range.begin
  const float* output_norm = nullptr;    // (n_embd); only with range.head
  DeviceMatrix output;                   // (n_vocab, n_embd); token_embd's storage when tied
  const float* inv_freq = nullptr;       // (rope_dim / 2)
  uint64_t bytes = 0;                    // device bytes of all of the above
  int64_t max_matrix_elems = 0;          // rows * cols of the largest matrix (GEMM scratch)
};

// Device bytes upload_weights will allocate for `range` (the memory plan), or an error naming
// a tensor whose type or shape the CUDA kernels cannot take.
Result<uint64_t> cuda_weight_bytes(const LoadedModel& model, const LayerRange& range);

// Uploads the weights of `range`. `staging` is a device buffer of staging_bytes used while
// converting block layouts (at least one GGUF row of the widest matrix). on_progress, if set,
// is called after each tensor with the GGUF bytes of the tensors uploaded so far, out of those
// of all tensors of `range` (the tied output matrix counts once).
Result<CudaWeights> upload_weights(const LoadedModel& model, const LayerRange& range,
                                   DevicePool& pool, void* staging, size_t staging_bytes,
                                   cudaStream_t stream, const LoadProgressFn& on_progress = {});

}  // namespace llamaserve::cuda
