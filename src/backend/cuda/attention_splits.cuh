// Combining the flash-decoding splits of one (row, head): the reduce kernel (attention.cu) and
// the decode kernel's last block (attention_decode.cu) share it.
#pragma once

#include <cmath>

#include "backend/cuda/attention.h"

namespace llamaserve::cuda {

// out[row, head, d] = Σ_p e^(m_p - M) acc_p[d] / Σ_p e^(m_p - M) l_p over the first n_parts
// splits' partials (read past the L1: other blocks wrote them in this kernel or the one before);
// the partials' stride is a.n_splits.
template <int D>
__device__ __forceinline__ float combine_attention_splits(const AttentionArgs& a, int64_t row,
                                                          int head, int d, int n_parts) {
  const int64_t acc_floats = a.n_batch_rows * a.n_head * a.n_splits * D;
  const int64_t first = (row * a.n_head + head) * a.n_splits;
  const float* ml = a.partial + acc_floats + 2 * first;
  float m_max = -INFINITY;
  for (int p = 0; p < n_parts; ++p) m_max = fmaxf(m_max, __ldcg(ml + 2 * p));
  float num = 0.0f, den = 0.0f;
  for (int p = 0; p < n_parts; ++p) {
    const float m = __ldcg(ml + 2 * p);
    if (m == -INFINITY) continue;
    const float w = __expf(m - m_max);
    num = fmaf(w, __ldcg(a.partial + (first + p) * D + d), num);
    den = fmaf(w, __ldcg(ml + 2 * p + 1), den);
  }
  return num / den;
}

}  // namespace llamaserve::cuda
