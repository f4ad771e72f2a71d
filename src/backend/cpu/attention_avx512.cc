// First: it includes immintrin.h in its own way (see there).
#include "backend/cpu/simd_avx512.h"

#include <algorithm>
#include <type_traits>

#include "backend/cpu/attention_avx512.h"
#include "backend/cpu/simd.h"

namespace llamaserve::cpu {
namespace {

namespace v = avx512;

// Heads per pass: their accumulators, the converted rows and a query or weight stay in the 32
// registers.
constexpr int kMaxHeads = 3;

// Eight floats in both halves.
LS_AVX512 inline __m512 dup8(const float* p) {
  return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(p))));
}

// Partial sum i of kHeads heads += q[h * n + d] * (dimension d of the 16 keys at `keys`).
template <int kHeads>
LS_AVX512 inline void dim_step(__m512 (&p)[kHeads][4], int i, const float* q, int64_t n,
                               const uint16_t* keys, int64_t d) {
  const __m512 k = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(keys)));
  for (int h = 0; h < kHeads; ++h) {
    p[h][i] = _mm512_fmadd_ps(_mm512_set1_ps(q[h * n + d]), k, p[h][i]);
  }
}

// attention.cc's block_scores_dim_major for kHeads heads and keys [j, j + 16) of a block of
// dimension-major f16 keys: the same four partial sums a key, in 16-lane registers, each
// dimension's keys converted once for all the heads.
template <int kHeads>
LS_AVX512 void scores_16_keys(const float* q, const uint16_t* kt, int32_t bs, int32_t j, int64_t n,
                              float scale, float* s, int64_t s_stride) {
  __m512 p[kHeads][4];
  for (int h = 0; h < kHeads; ++h) {
    for (int i = 0; i < 4; ++i) p[h][i] = _mm512_setzero_ps();
  }
  int64_t d = 0;
  for (; d + 4 <= n; d += 4) {
    for (int i = 0; i < 4; ++i) dim_step<kHeads>(p, i, q, n, kt + (d + i) * bs + j, d + i);
  }
  for (int i = 0; d + i < n; ++i) dim_step<kHeads>(p, i, q, n, kt + (d + i) * bs + j, d + i);
  for (int h = 0; h < kHeads; ++h) {
    const __m512 sum =
        _mm512_add_ps(_mm512_add_ps(p[h][0], p[h][1]), _mm512_add_ps(p[h][2], p[h][3]));
    _mm512_storeu_ps(s + h * s_stride + j, _mm512_mul_ps(sum, _mm512_set1_ps(scale)));
  }
}

// attention.cc's accumulate_values for kHeads heads, 64 values (four registers) a head at a
// time, or 16 when fewer are left: value c of a head starts from acc * keep and takes the rows'
// products in row order, as there.
template <int kHeads, int kRegs>
LS_AVX512 void accumulate_slice(float* acc, const float* keep, const float* p, int64_t p_stride,
                                const uint16_t* values, int32_t n_rows, int64_t n, int64_t first) {
  __m512 a[kHeads][kRegs];
  for (int h = 0; h < kHeads; ++h) {
    const __m512 keep_h = _mm512_set1_ps(keep[h]);
    for (int r = 0; r < kRegs; ++r) {
      a[h][r] = _mm512_mul_ps(_mm512_loadu_ps(acc + h * n + first + 16 * r), keep_h);
    }
  }
  for (int32_t j = 0; j < n_rows; ++j) {
    const uint16_t* row = values + j * n + first;
    __m512 vr[kRegs];
    for (int r = 0; r < kRegs; ++r) {
      vr[r] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 16 * r)));
    }
    for (int h = 0; h < kHeads; ++h) {
      const __m512 pj = _mm512_set1_ps(p[h * p_stride + j]);
      for (int r = 0; r < kRegs; ++r) a[h][r] = _mm512_fmadd_ps(pj, vr[r], a[h][r]);
    }
  }
  for (int h = 0; h < kHeads; ++h) {
    for (int r = 0; r < kRegs; ++r) _mm512_storeu_ps(acc + h * n + first + 16 * r, a[h][r]);
  }
}

template <int kHeads>
LS_AVX512 void accumulate_heads(float* acc, const float* keep, const float* p, int64_t p_stride,
                                const uint16_t* values, int32_t n_rows, int64_t n) {
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    accumulate_slice<kHeads, 4>(acc, keep, p, p_stride, values, n_rows, n, i);
  }
  for (; i < n; i += 16) accumulate_slice<kHeads, 1>(acc, keep, p, p_stride, values, n_rows, n, i);
}

// Values [c, c + 8) of Q8_0 blocks a and b as floats (unscaled): a in lanes 0..7, b in 8..15.
LS_AVX512 inline __m512 load_q8_pair(const int8_t* a, const int8_t* b) {
  const __m128i bytes = _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(a)),
                                           _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b)));
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes));
}

// attention.cc's 8-key block_scores on Q8_0 keys for kHeads heads: each 32-value block's sums
// unscaled in the lane halves, reduced with hsum8 and multiplied by the eight keys' scales.
template <int kHeads>
LS_AVX512 void scores_8_keys(const float* q, const BlockQ8_0* const* k, int64_t n, float scale,
                             float* s, int64_t s_stride) {
  __m256 total[kHeads];
  for (int h = 0; h < kHeads; ++h) total[h] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    __m512 acc[kHeads][4];
    for (int h = 0; h < kHeads; ++h) {
      for (int p = 0; p < 4; ++p) acc[h][p] = _mm512_setzero_ps();
    }
    for (int c = 0; c < kQK8_0; c += 8) {
      const __m512 pair0 = load_q8_pair(k[0][b].qs + c, k[1][b].qs + c);
      const __m512 pair1 = load_q8_pair(k[2][b].qs + c, k[3][b].qs + c);
      const __m512 pair2 = load_q8_pair(k[4][b].qs + c, k[5][b].qs + c);
      const __m512 pair3 = load_q8_pair(k[6][b].qs + c, k[7][b].qs + c);
      for (int h = 0; h < kHeads; ++h) {
        const __m512 qc = dup8(q + h * n + b * kQK8_0 + c);
        acc[h][0] = _mm512_fmadd_ps(qc, pair0, acc[h][0]);
        acc[h][1] = _mm512_fmadd_ps(qc, pair1, acc[h][1]);
        acc[h][2] = _mm512_fmadd_ps(qc, pair2, acc[h][2]);
        acc[h][3] = _mm512_fmadd_ps(qc, pair3, acc[h][3]);
      }
    }
    const __m256 scales = q8_scales(k, b);
    for (int h = 0; h < kHeads; ++h) {
      const __m256 sums =
          hsum8(v::low_half(acc[h][0]), v::high_half(acc[h][0]), v::low_half(acc[h][1]),
                v::high_half(acc[h][1]), v::low_half(acc[h][2]), v::high_half(acc[h][2]),
                v::low_half(acc[h][3]), v::high_half(acc[h][3]));
      total[h] = _mm256_fmadd_ps(sums, scales, total[h]);
    }
  }
  for (int h = 0; h < kHeads; ++h) {
    _mm256_storeu_ps(s + h * s_stride, _mm256_mul_ps(total[h], _mm256_set1_ps(scale)));
  }
}

// attention.cc's accumulate_values on Q8_0 values for kHeads heads, kBlocks blocks of 32 (two
// registers each) from block `first`: each row's weight multiplied by the block's scale once.
template <int kHeads, int kBlocks>
LS_AVX512 void accumulate_q8_slice(float* acc, const float* keep, const float* p, int64_t p_stride,
                                   const BlockQ8_0* values, int32_t n_rows, int64_t n,
                                   int64_t first) {
  constexpr int kRegs = 2 * kBlocks;
  const int64_t row_blocks = n / kQK8_0;
  __m512 a[kHeads][kRegs];
  for (int h = 0; h < kHeads; ++h) {
    const __m512 keep_h = _mm512_set1_ps(keep[h]);
    for (int r = 0; r < kRegs; ++r) {
      a[h][r] = _mm512_mul_ps(_mm512_loadu_ps(acc + h * n + first * kQK8_0 + 16 * r), keep_h);
    }
  }
  for (int32_t j = 0; j < n_rows; ++j) {
    const BlockQ8_0* row = values + j * row_blocks + first;
    for (int b = 0; b < kBlocks; ++b) {
      const __m512 lo = _mm512_cvtepi32_ps(
          _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row[b].qs))));
      const __m512 hi = _mm512_cvtepi32_ps(
          _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row[b].qs + 16))));
      const float d = f16_to_f32(row[b].d.bits);
      for (int h = 0; h < kHeads; ++h) {
        const __m512 pd = _mm512_set1_ps(p[h * p_stride + j] * d);
        a[h][2 * b] = _mm512_fmadd_ps(pd, lo, a[h][2 * b]);
        a[h][2 * b + 1] = _mm512_fmadd_ps(pd, hi, a[h][2 * b + 1]);
      }
    }
  }
  for (int h = 0; h < kHeads; ++h) {
    for (int r = 0; r < kRegs; ++r) {
      _mm512_storeu_ps(acc + h * n + first * kQK8_0 + 16 * r, a[h][r]);
    }
  }
}

template <int kHeads>
LS_AVX512 void accumulate_heads(float* acc, const float* keep, const float* p, int64_t p_stride,
                                const BlockQ8_0* values, int32_t n_rows, int64_t n) {
  const int64_t n_blocks = n / kQK8_0;
  int64_t b = 0;
  for (; b + 2 <= n_blocks; b += 2) {
    accumulate_q8_slice<kHeads, 2>(acc, keep, p, p_stride, values, n_rows, n, b);
  }
  if (b < n_blocks) accumulate_q8_slice<kHeads, 1>(acc, keep, p, p_stride, values, n_rows, n, b);
}

// Calls fn(std::integral_constant<int, k>{}, h) for each pass over the n_heads heads: k heads
// from head h, k = min(kMaxHeads, heads left).
template <typename Fn>
void for_head_passes(int32_t n_heads, Fn&& fn) {
  for (int32_t h = 0; h < n_heads; h += kMaxHeads) {
    switch (std::min(kMaxHeads, n_heads - h)) {
      case 1: fn(std::integral_constant<int, 1>{}, h); break;
      case 2: fn(std::integral_constant<int, 2>{}, h); break;
      default: fn(std::integral_constant<int, 3>{}, h);
    }
  }
}

int32_t block_scores_heads(const float* q, int32_t n_heads, const BlockQ8_0* keys, int32_t n_keys,
                           int64_t head_dim, float scale, float* s, int64_t s_stride) {
  int32_t j = 0;
  for (; j + 8 <= n_keys; j += 8) {
    const BlockQ8_0* k[8];
    for (int r = 0; r < 8; ++r) k[r] = keys + (j + r) * (head_dim / kQK8_0);
    for_head_passes(n_heads, [&](auto heads, int32_t h) {
      scores_8_keys<heads>(q + h * head_dim, k, head_dim, scale, s + h * s_stride + j, s_stride);
    });
  }
  return j;
}

template <typename T>
void accumulate_values_heads(float* acc, const float* keep, const float* p, int64_t p_stride,
                             int32_t n_heads, const T* values, int32_t n_rows, int64_t head_dim) {
  for_head_passes(n_heads, [&](auto heads, int32_t h) {
    accumulate_heads<heads>(acc + h * head_dim, keep + h, p + h * p_stride, p_stride, values,
                            n_rows, head_dim);
  });
}

}  // namespace

int32_t block_scores_heads_avx512(const float* q, int32_t n_heads, const uint16_t* keys,
                                  int32_t block_size, int32_t n_keys, int64_t head_dim, float scale,
                                  float* s, int64_t s_stride) {
  int32_t j = 0;
  for (; j < n_keys && j + 16 <= block_size; j += 16) {
    for_head_passes(n_heads, [&](auto heads, int32_t h) {
      scores_16_keys<heads>(q + h * head_dim, keys, block_size, j, head_dim, scale,
                            s + h * s_stride, s_stride);
    });
  }
  return std::min(j, n_keys);
}

int32_t block_scores_heads_avx512(const float* q, int32_t n_heads, const BlockQ8_0* keys,
                                  int32_t n_keys, int64_t head_dim, float scale, float* s,
                                  int64_t s_stride) {
  return block_scores_heads(q, n_heads, keys, n_keys, head_dim, scale, s, s_stride);
}

void accumulate_values_heads_avx512(float* acc, const float* keep, const float* p, int64_t p_stride,
                                    int32_t n_heads, const uint16_t* values, int32_t n_rows,
                                    int64_t head_dim) {
  accumulate_values_heads(acc, keep, p, p_stride, n_heads, values, n_rows, head_dim);
}

void accumulate_values_heads_avx512(float* acc, const float* keep, const float* p, int64_t p_stride,
                                    int32_t n_heads, const BlockQ8_0* values, int32_t n_rows,
                                    int64_t head_dim) {
  accumulate_values_heads(acc, keep, p, p_stride, n_heads, values, n_rows, head_dim);
}

}  // namespace llamaserve::cpu
