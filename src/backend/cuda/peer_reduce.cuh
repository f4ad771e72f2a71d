// Device side of the peer-to-peer reductions (the protocol is in peer_all_reduce.h). A producer
// kernel calls peer_reduce_write_slot() once its inputs are ready (after pdl_wait), stores its
// partial with peer_reduce_store(), and ends with peer_reduce_arrive() in every thread; a
// consumer calls peer_reduce_wait() in every thread of its block (after pdl_wait), then reads
// the sums with peer_reduce_sum().
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/peer_all_reduce.h"

namespace llamaserve::cuda {

// A wait for a peer that lasts this long traps instead of hanging the device: a peer that never
// arrives (and was not aborted) is a bug, not a slow step.
inline constexpr long long kPeerSpinLimitCycles = 20'000'000'000LL;  // about 10 s at H200 clocks

__device__ __forceinline__ unsigned long long peer_load_acquire(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void peer_store_release(unsigned long long* p, unsigned long long v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ bool peer_reduce_active(const PeerReduceView& v) {
  return v.n_ranks > 1;
}

// The slot the running reduction's partials go to.
__device__ __forceinline__ int peer_reduce_write_slot(const PeerReduceView& v) {
  return static_cast<int>((__ldcg(v.epoch) + 1) & 1);
}

// Element i of this rank's partial, into every rank's inbox.
__device__ __forceinline__ void peer_reduce_store(const PeerReduceView& v, int slot, int64_t i,
                                                  float value) {
  const int64_t at = (static_cast<int64_t>(slot) * v.n_ranks + v.rank) * v.capacity + i;
#pragma unroll 1
  for (int d = 0; d < v.n_ranks; ++d) v.inbox[d][at] = value;
}

// Every thread of every CTA of the producer, after its stores. The last CTA publishes the
// reduction: the CTAs' fences before their arrival, and the last one's fence after it, order
// every CTA's stores before the flags (the fence-and-counter pattern, at system scope).
__device__ __forceinline__ void peer_reduce_arrive(const PeerReduceView& v) {
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x != 0 || threadIdx.y != 0 || threadIdx.z != 0) return;
  const unsigned int ctas = gridDim.x * gridDim.y * gridDim.z;
  if (atomicAdd(v.arrivals, 1u) != ctas - 1) return;
  __threadfence_system();
  *v.arrivals = 0;
  const unsigned long long e = __ldcg(v.epoch) + 1;
  *v.epoch = e;
  __threadfence_system();
#pragma unroll 1
  for (int d = 0; d < v.n_ranks; ++d) {
    if (d != v.rank) peer_store_release(v.flags[d] + v.rank, e);
  }
}

// Every thread of the consumer's block: waits until every peer has published this rank's latest
// reduction (or the group was aborted). Returns the slot of its partials.
__device__ __forceinline__ int peer_reduce_wait(const PeerReduceView& v) {
  const unsigned long long e = __ldcg(v.epoch);
  const int t = static_cast<int>(threadIdx.x);
  if (t < v.n_ranks && t != v.rank) {
    const unsigned long long* flag = v.flags[v.rank] + t;
    const long long start = clock64();
    for (unsigned int spins = 0; peer_load_acquire(flag) < e; ++spins) {
      if ((spins & 1023u) == 1023u) {
        if (*v.abort != 0) break;
        if (clock64() - start > kPeerSpinLimitCycles) __trap();
      }
    }
  }
  __syncthreads();
  return static_cast<int>(e & 1);
}

// The sum over ranks, in rank order, of element i of the partials in `slot` (read past the L1:
// the peers wrote them).
__device__ __forceinline__ float peer_reduce_sum(const PeerReduceView& v, int slot, int64_t i) {
  const float* p = v.inbox[v.rank] + static_cast<int64_t>(slot) * v.n_ranks * v.capacity + i;
  float sum = 0.0f;
#pragma unroll 1
  for (int r = 0; r < v.n_ranks; ++r) sum += __ldcv(p + r * v.capacity);
  return sum;
}

}  // namespace llamaserve::cuda
