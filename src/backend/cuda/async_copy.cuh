// Asynchronous global-to-shared copies (cp.async, sm_80+) of the attention kernels
// (attention_mma.cu, attention_decode_mma.cu): a thread's copies fly while it computes, and land
// in shared memory without passing through its registers.
#pragma once

#include <cstdint>

namespace llamaserve::cuda {

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// kBytes (4, 8 or 16) global -> shared, or zeros where `zero` (src is then not read); 16 bytes
// go through L2 only (K/V rows are read once per block).
template <int kBytes>
__device__ __forceinline__ void cp_async_or_zero(void* dst_shared, const void* src_global,
                                                 bool zero) {
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16);
  const int src_bytes = zero ? 0 : kBytes;
  if constexpr (kBytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(shared_address(dst_shared)),
                 "l"(src_global), "r"(src_bytes)
                 : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(shared_address(dst_shared)),
                 "l"(src_global), "n"(kBytes), "r"(src_bytes)
                 : "memory");
  }
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}

__device__ __forceinline__ void cp_async_16(void* dst_shared, const void* src_global) {
  cp_async_or_zero<16>(dst_shared, src_global, false);
}

// Waits until at most `kPending` of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

}  // namespace llamaserve::cuda
