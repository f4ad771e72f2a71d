// Kernel launches with programmatic dependent launch (PDL, sm_90): a kernel may be scheduled
// while its predecessor in the stream still runs, so that its launch and its first weight loads
// overlap the predecessor's tail instead of following it. Decode steps are hundreds of short
// kernels in a row (a few per layer), where those gaps add up to a large part of the step.
//
// The contract, for every kernel launched through launch_kernel():
//   - it calls pdl_wait() before it reads or writes anything an earlier kernel of the stream
//     writes or reads (pdl_wait returns once the predecessor grid has completed and its memory
//     is visible; the predecessor had waited for its own, so this covers the whole stream);
//   - before pdl_wait() it may only read what no kernel of the stream writes: the weights, and
//     what the host staged for the pass (positions, sequence indices, block tables, attention
//     tiles: BatchStaging, written by copies that precede the pass's first kernel), and the
//     KV cache slots of positions written by earlier passes (AttentionArgs::earlier_kv_settled:
//     those kernels completed before the pass's copies);
//   - it may call pdl_launch_dependents() early to let its successor be scheduled.
// Kernels launched with <<<>>> are ordered as usual. Without PDL (a LaunchStream with pdl false,
// from KernelTuning::pdl, or before sm_90) both calls do nothing and launches are plain.
#pragma once

#include <utility>

#include <cuda_runtime.h>

#include "backend/cuda/launch.h"

namespace llamaserve::cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem_bytes, stream>>>(args...), with the PDL attribute when stream.pdl
// and `stream` is a created stream (launches on the legacy default stream, as the kernel tests
// make, stay plain). Returns the launch error (check it with LS_CUDA_CHECK).
template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes,
                          LaunchStream stream, Args&&... args) {
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream.stream;
  config.attrs = &attribute;
  config.numAttrs = stream.pdl && stream.stream != nullptr ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace llamaserve::cuda
