// The memory plan of one model instance on one device, made before anything is allocated:
// weights + activations + workspace + KV cache against gpu_memory_utilization of the device.
// It sizes the device pool exactly, and refuses with the numbers (what needs how much, what
// is free) instead of failing later in cudaMalloc.
#pragma once

#include <cstdint>
#include <string>

#include "backend/cuda/cuda_state.h"
#include "backend/cuda/device_matrix.h"
#include "backend/layer_range.h"
#include "core/status.h"
#include "model/weights.h"

namespace llamaserve::cuda {

struct MemoryPlanRequest {
  LayerRange range;
  CudaLimits limits;
  double gpu_memory_utilization = 0.90;
  int64_t kv_capacity_tokens = 0;  // 0: every byte the budget leaves
  int32_t kv_block_size = 16;
  KvType kv_type = KvType::kF16;
  uint64_t workspace_bytes = 0;  // cuBLAS workspace and the like
  // Device memory as cudaMemGetInfo reports it (before this instance allocates).
  uint64_t device_free = 0;
  uint64_t device_total = 0;
};

struct MemoryPlan {
  uint64_t budget = 0;  // device_total * utilization - what others already use
  uint64_t device_free = 0;
  uint64_t device_total = 0;
  uint64_t weights = 0;
  uint64_t activations = 0;
  uint64_t workspace = 0;
  KvType kv_type = KvType::kF16;
  uint64_t kv_bytes_per_block = 0;
  int32_t kv_blocks = 0;  // usable blocks; the pool holds one more (padding rows write there)

  // K and V are separate allocations, each rounded up to the pool's alignment.
  uint64_t kv_bytes() const {
    return 2 * align_up(kv_bytes_per_block / 2 * (static_cast<uint64_t>(kv_blocks) + 1),
                        kDeviceAlignment);
  }
  uint64_t pool_bytes() const { return weights + activations + workspace + kv_bytes(); }
  // "weights 3.56 GiB, activations ..., KV 20000 blocks x 16 tokens f16 (9.77 GiB), pool ... of
  // budget ... (free ... of ...)".
  std::string describe(int32_t block_size) const;
};

Result<MemoryPlan> plan_memory(const LoadedModel& model, const MemoryPlanRequest& request);

}  // namespace llamaserve::cuda
