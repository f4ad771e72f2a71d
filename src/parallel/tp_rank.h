// What makes a process's GPU a tensor-parallel rank, shared by the executor whose ranks are
// threads of one process (multi_gpu_executor.cc) and the one whose ranks are processes
// (distributed_tp.cc), so that both build the same parts: the shard comes from tp_shard.h,
// and the partial sums meet in NCCL all-reduces (the ways of summing: rank_sum.h). Built only
// with LLAMASERVE_CUDA.
#pragma once

#include <cstddef>
#include <string>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "backend/cuda/rank_sum.h"
#include "core/status.h"
#include "model/weights.h"

namespace llamaserve {

// NVLink SHARP (multicast) stays off unless the operator sets NCCL_NVLS_ENABLE. Call before
// the communicator is created (NCCL reads the variable then).
void keep_nvls_off_by_default();

// Sums `count` elements of `type` at `data` in place over the ranks of `comm`, on `stream`.
Status nccl_all_reduce_sum(ncclComm_t comm, void* data, size_t count, cuda::SumType type,
                           cudaStream_t stream);

// What a rank's shard holds of the full model, for the log:
// "2 of 4 heads, 1 of 2 KV heads, 384 of 768 FFN columns".
std::string describe_shard(const LoadedModel& full, const LoadedModel& shard);

}  // namespace llamaserve
