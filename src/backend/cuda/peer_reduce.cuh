// Device side of the peer-to-peer reductions (the protocol is in peer_all_reduce.h). Every word
// of an inbox carries its value and the epoch of the reduction that wrote it (low and high 32
// bits, one 8-byte store), so a reader knows a word has arrived without any fence or flag.
//
// A producer kernel takes its epoch with peer_reduce_epoch() once its inputs are ready (after
// pdl_wait) and stores its partial with peer_reduce_store(); nothing else. A consumer takes
// the same epoch, reads the sums with peer_reduce_sum() (which waits for each word) and ends
// with peer_reduce_done() in every thread of every block, which raises the epoch once all of
// its blocks are through.
#pragma once

#include <cstdint>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "backend/cuda/half_rows.cuh"
#include "backend/cuda/peer_all_reduce.h"

namespace llamaserve::cuda {

// A wait for a peer that lasts this long traps instead of hanging the device: a peer that never
// arrives (and was not aborted) is a bug, not a slow step.
inline constexpr long long kPeerSpinLimitCycles = 20'000'000'000LL;  // about 10 s at H200 clocks

__device__ __forceinline__ bool peer_reduce_active(const PeerReduceView& v) {
  return v.n_ranks > 1;
}

// The running reduction's epoch (its low 32 bits: words are compared for equality, and a
// slot's stale words are two epochs old).
__device__ __forceinline__ uint32_t peer_reduce_epoch(const PeerReduceView& v) {
  return static_cast<uint32_t>(__ldcg(v.epoch) + 1);
}

__device__ __forceinline__ unsigned long long* peer_reduce_word(const PeerReduceView& v, int dest,
                                                                uint32_t epoch, int from,
                                                                int64_t i) {
  return v.inbox[dest] + ((static_cast<int64_t>(epoch & 1) * v.n_ranks + from) * v.capacity + i);
}

// Element i of this rank's partial, into every rank's inbox.
__device__ __forceinline__ void peer_reduce_store(const PeerReduceView& v, uint32_t epoch,
                                                  int64_t i, float value) {
  const unsigned long long word =
      static_cast<unsigned long long>(epoch) << 32 | __float_as_uint(value);
#pragma unroll 1
  for (int d = 0; d < v.n_ranks; ++d) {
    asm volatile(
        "st.relaxed.sys.global.u64 [%0], %1;" ::"l"(peer_reduce_word(v, d, epoch, v.rank, i)),
        "l"(word)
        : "memory");
  }
}

// The word at p once it carries `epoch` (`word`: its first load), or as it is once the group
// is aborted; traps after kPeerSpinLimitCycles.
__device__ __forceinline__ unsigned long long peer_reduce_await(const PeerReduceView& v,
                                                                const unsigned long long* p,
                                                                uint32_t epoch,
                                                                unsigned long long word) {
  if (static_cast<uint32_t>(word >> 32) == epoch) return word;
  const long long start = clock64();
  for (unsigned int spins = 1;; ++spins) {
    asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(word) : "l"(p) : "memory");
    if (static_cast<uint32_t>(word >> 32) == epoch) break;
    if ((spins & 1023u) == 0) {
      if (*v.abort != 0) break;
      if (clock64() - start > kPeerSpinLimitCycles) __trap();
    }
  }
  return word;
}

// The sum over ranks, in rank order, of element i of the partials of `epoch`, each word waited
// for (or taken as it is once the group is aborted).
__device__ __forceinline__ float peer_reduce_sum(const PeerReduceView& v, uint32_t epoch,
                                                 int64_t i) {
  float sum = 0.0f;
#pragma unroll 1
  for (int r = 0; r < v.n_ranks; ++r) {
    const unsigned long long* p = peer_reduce_word(v, v.rank, epoch, r, i);
    unsigned long long word;
    asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(word) : "l"(p) : "memory");
    word = peer_reduce_await(v, p, epoch, word);
    sum += __uint_as_float(static_cast<uint32_t>(word));
  }
  return sum;
}

// peer_reduce_sum for K elements at once (base + at[k] for the k with valid[k]; R >= the
// group's ranks): every word is loaded before any is checked, so that a thread waits for one
// round trip, not one per element and rank. The same sums, in the same order.
template <int K, int R>
__device__ __forceinline__ void peer_reduce_sums(const PeerReduceView& v, uint32_t epoch,
                                                 int64_t base, const int64_t (&at)[K],
                                                 const bool (&valid)[K], float (&sum)[K]) {
  unsigned long long words[K][R];
#pragma unroll
  for (int k = 0; k < K; ++k) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (valid[k] && r < v.n_ranks) {
        asm volatile("ld.relaxed.sys.global.u64 %0, [%1];"
                     : "=l"(words[k][r])
                     : "l"(peer_reduce_word(v, v.rank, epoch, r, base + at[k]))
                     : "memory");
      }
    }
  }
#pragma unroll
  for (int k = 0; k < K; ++k) {
    sum[k] = 0.0f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (!valid[k] || r >= v.n_ranks) continue;
      const unsigned long long word = peer_reduce_await(
          v, peer_reduce_word(v, v.rank, epoch, r, base + at[k]), epoch, words[k][r]);
      sum[k] += __uint_as_float(static_cast<uint32_t>(word));
    }
  }
}

// Every thread of every block of a consumer, after its last peer_reduce_sum: the last block
// through raises the epoch (for the kernels after this one).
__device__ __forceinline__ void peer_reduce_done(const PeerReduceView& v) {
  __syncthreads();
  if (threadIdx.x != 0 || threadIdx.y != 0 || threadIdx.z != 0) return;
  const unsigned int blocks = gridDim.x * gridDim.y * gridDim.z;
  if (blocks > 1 && atomicAdd(v.arrivals, 1u) != blocks - 1) return;
  *v.arrivals = 0;
  *v.epoch = __ldcg(v.epoch) + 1;
}

// Pulled sums (peer_all_reduce.h). The consumer's wait, by every thread of a block before it
// reads any partial: thread 0 waits until every peer has signalled this rank's running epoch
// (which the producer's peer_pull_signal raised), acquiring at system scope; the barrier then
// orders every thread's reads after it.
__device__ __forceinline__ void peer_pull_wait(const PeerReduceView& v) {
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
    const unsigned long long epoch = __ldcg(v.pull_epoch);
    const long long start = clock64();
#pragma unroll 1
    for (int p = 0; p < v.n_ranks; ++p) {
      if (p == v.rank) continue;
      const unsigned long long* signal = v.pull_signals[v.rank] + p;
      for (unsigned int spins = 1;; ++spins) {
        unsigned long long seen;
        asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(seen) : "l"(signal) : "memory");
        if (seen >= epoch) break;
        if ((spins & 1023u) == 0) {
          if (*v.abort != 0) break;
          if (clock64() - start > kPeerSpinLimitCycles) __trap();
        }
      }
    }
  }
  __syncthreads();
}

// Element i of rank r's partial in `slot` (read at L2: a peer's, or this rank's from a GEMM).
__device__ __forceinline__ float peer_pull_element(const PeerReduceView& v, int r, int slot,
                                                   int64_t i) {
  const char* base = static_cast<const char*>(v.pull[r]) + slot * v.pull_slot_bytes;
  switch (v.pull_type) {
    case SumType::kF16: {
      const unsigned short bits = __ldcg(reinterpret_cast<const unsigned short*>(base) + i);
      return __half2float(__ushort_as_half(bits));
    }
    case SumType::kBF16: {
      const unsigned short bits = __ldcg(reinterpret_cast<const unsigned short*>(base) + i);
      return __uint_as_float(static_cast<uint32_t>(bits) << 16);
    }
    default: return __ldcg(reinterpret_cast<const float*>(base) + i);
  }
}

// Elements i to i + 3 of rank r's partial in `slot` (peer_pull_element four at once; i % 4 == 0,
// the slot's rows at strides of whole 4-element groups).
__device__ __forceinline__ float4 peer_pull_element4(const PeerReduceView& v, int r, int slot,
                                                     int64_t i) {
  const char* base = static_cast<const char*>(v.pull[r]) + slot * v.pull_slot_bytes;
  if (v.pull_type == SumType::kF32) return __ldcg(reinterpret_cast<const float4*>(base) + i / 4);
  return load_half4(base, i, v.pull_type == SumType::kBF16);
}

// The sum over ranks, in rank order, of element i of the partials in `slot` (after
// peer_pull_wait): the same bits on every rank.
__device__ __forceinline__ float peer_pull_sum(const PeerReduceView& v, int slot, int64_t i) {
  float sum = 0.0f;
#pragma unroll 1
  for (int r = 0; r < v.n_ranks; ++r) sum += peer_pull_element(v, r, slot, i);
  return sum;
}

}  // namespace llamaserve::cuda
