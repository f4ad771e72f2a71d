// How a tensor-parallel rank's partials are summed over the ranks: the hook the executors give
// the CUDA backend (an NCCL all-reduce on the rank's communicator).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include <cuda_runtime_api.h>

#include "core/status.h"

namespace llamaserve::cuda {

// The elements of a tensor-parallel sum.
enum class SumType { kF32, kF16, kBF16 };

// Bytes of one element of `type`.
constexpr int64_t sum_type_bytes(SumType type) { return type == SumType::kF32 ? 4 : 2; }

// Sums `count` elements of `type` at `data` over the tensor-parallel ranks, in place, queued on
// `stream`; every rank calls it in the same order.
using AllReduceFn =
    std::function<Status(void* data, size_t count, SumType type, cudaStream_t stream)>;

}  // namespace llamaserve::cuda
