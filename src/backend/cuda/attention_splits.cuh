// Combining the flash-decoding splits of one (row, head): the reduce kernel (attention.cu) and
// the decode kernel's last block (attention_decode.cu) share it.
#pragma once

#include <cmath>

#include "backend/cuda/attention.h"

namespace llamaserve::cuda {

// out[row, head, d] = Σ_p e^(m_p - M) acc_p[d] / Σ_p e^(m_p - M) l_p over the first n_parts
// splits' partials (read past the L1: other blocks wrote them in this kernel or the one before);
// the partials' stride is a.n_splits. The splits are read kCombineChunk at a time, every load of
// a chunk ahead of its arithmetic (a chunk's indices past n_parts read the last split again and
// are not added), so that a chunk's reads are in flight at once: one split at a time, each added
// two L2 round trips to the kernel's tail (LLaMA-3-8B's 1 x 2048 positions in 16 splits 16.3 us
// against 11.3, in 8 12.5 against 10.0; one sequence of 8000+128 positions 356 -> 379 tok/s:
// bench/results/2026-12-06-h100-decode-split-combine.md). Each chunk's maxima, sums and P·V
// sums come in one round trip: the sums so far are rescaled when a chunk raises the maximum
// (online, as the kernels' own positions are), so 16 splits take two round trips, not four.
inline constexpr int kCombineChunk = 8;
template <int D>
__device__ __forceinline__ float combine_attention_splits(const AttentionArgs& a, int64_t row,
                                                          int head, int d, int n_parts) {
  const int64_t acc_floats = a.n_batch_rows * a.n_head * a.n_splits * D;
  const int64_t first = (row * a.n_head + head) * a.n_splits;
  const auto* ml = reinterpret_cast<const float2*>(a.partial + acc_floats) + first;  // (m, l)
  const float* acc = a.partial + first * D + d;
  float m_max = -INFINITY;
  float num = 0.0f, den = 0.0f;
  for (int p0 = 0; p0 < n_parts; p0 += kCombineChunk) {
    float2 m_l[kCombineChunk];
    float part[kCombineChunk];
#pragma unroll
    for (int j = 0; j < kCombineChunk; ++j) {
      const int p = min(p0 + j, n_parts - 1);
      m_l[j] = __ldcg(ml + p);
      part[j] = __ldcg(acc + static_cast<int64_t>(p) * D);
    }
    float chunk_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < kCombineChunk; ++j) chunk_max = fmaxf(chunk_max, m_l[j].x);
    // Never for a chunk of empty splits (-inf); the rescale is 0 while m_max is -inf.
    if (chunk_max > m_max) {
      const float rescale = __expf(m_max - chunk_max);
      num *= rescale;
      den *= rescale;
      m_max = chunk_max;
    }
#pragma unroll
    for (int j = 0; j < kCombineChunk; ++j) {
      // Past n_parts, or an empty split (its sums may be unwritten): nothing to add.
      if (p0 + j >= n_parts || m_l[j].x == -INFINITY) continue;
      const float w = __expf(m_l[j].x - m_max);
      num = fmaf(w, part[j], num);
      den = fmaf(w, m_l[j].y, den);
    }
  }
  return num / den;
}

}  // namespace llamaserve::cuda
