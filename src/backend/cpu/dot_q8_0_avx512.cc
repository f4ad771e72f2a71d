// AVX-512 dot products of Q8_0 weights with ActBlockQ8_32 rows: dot_q8_0.cc's kernels with
// vpdpbusd in place of the sign trick + maddubs + madd.
//
// One token (decode): 256-bit registers, the AVX2 kernel's loop step for step. Four tokens
// (prompt passes): each 512-bit register holds two tokens, the first in lanes 0..7 and the
// second in lanes 8..15; the weight bytes are split and signed once and broadcast to both
// halves, and each half does what the AVX2 kernel does for its token. Both keep the AVX2
// kernels' float operations in the same order, so the results are the same bits
// (dot_avx512.h).

// First: it includes immintrin.h in its own way (see there).
#include "backend/cpu/simd_avx512.h"

#include <cmath>
#include <cstring>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/dot_avx512.h"
#include "backend/cpu/simd.h"
#include "quant/blocks.h"

namespace llamaserve::cpu {
namespace {

namespace v = avx512;

// Q8_0: w = d * q, q in [-127, 127] (-128 works too). Σ q x = Σ |q| * (x with q's sign).
LS_AVX512 float q8_0_row1(const BlockQ8_0* w, const ActBlockQ8_32* x, int64_t n_blocks) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const __m256i q = load32(w[b].qs);
    const __m256i p =
        v::dpbusd(_mm256_setzero_si256(), _mm256_abs_epi8(q), v::apply_sign(load32(x[b].qs), q));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(to_f32(w[b].d) * x[b].d), _mm256_cvtepi32_ps(p), acc);
  }
  return hsum(acc);
}

// Tokens t and t + 1 of one block: `magnitude` and `q` hold the block's bytes in both halves.
LS_AVX512 inline __m512 q8_0_token_pair(__m512i magnitude, __m512i q, float d,
                                        const ActBlockQ8_32& x0, const ActBlockQ8_32& x1,
                                        __m512 acc) {
  const __m512i p =
      v::dpbusd(_mm512_setzero_si512(), magnitude, v::apply_sign(v::load2x32(x0.qs, x1.qs), q));
  const __m512 scale = v::join(_mm256_set1_ps(d * x0.d), _mm256_set1_ps(d * x1.d));
  return _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(p), acc);
}

LS_AVX512 void q8_0_row4(const BlockQ8_0* w, const ActBlockQ8_32* const* x, int64_t n_blocks,
                         float* out) {
  __m512 acc01 = _mm512_setzero_ps(), acc23 = _mm512_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const __m512i q = v::broadcast32(load32(w[b].qs));
    const __m512i magnitude = _mm512_abs_epi8(q);
    const float d = to_f32(w[b].d);
    acc01 = q8_0_token_pair(magnitude, q, d, x[0][b], x[1][b], acc01);
    acc23 = q8_0_token_pair(magnitude, q, d, x[2][b], x[3][b], acc23);
  }
  out[0] = hsum(v::low_half(acc01));
  out[1] = hsum(v::high_half(acc01));
  out[2] = hsum(v::low_half(acc23));
  out[3] = hsum(v::high_half(acc23));
}

LS_AVX512 float q8_0_dot(const void* w_row, const void* act_row, int64_t n) {
  return q8_0_row1(static_cast<const BlockQ8_0*>(w_row), static_cast<const ActBlockQ8_32*>(act_row),
                   n / 32);
}

template <float (*Dot)(const void*, const void*, int64_t)>
LS_AVX512 void rows1(const uint8_t* w, size_t w_stride, int64_t n_rows, const void* act_row,
                     int64_t n, float* y) {
  for (int64_t r = 0; r < n_rows; ++r)
    y[r] = Dot(w + static_cast<size_t>(r) * w_stride, act_row, n);
}

LS_AVX512 void q8_0_rows4(const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                          size_t act_stride, int64_t n, float* y, int64_t y_stride) {
  const ActBlockQ8_32* x[4];
  for (int t = 0; t < 4; ++t) x[t] = reinterpret_cast<const ActBlockQ8_32*>(act + t * act_stride);
  for (int64_t r = 0; r < n_rows; ++r) {
    float out[4];
    q8_0_row4(reinterpret_cast<const BlockQ8_0*>(w + r * w_stride), x, n / 32, out);
    for (int t = 0; t < 4; ++t) y[t * y_stride + r] = out[t];
  }
}

}  // namespace

// The entry points are plain functions (no target attribute, so that their declarations in
// dot_avx512.h are ordinary ones); each passes straight on to its AVX-512 body.
float dot_q8_0_avx512(const void* w_row, const void* act_row, int64_t n) {
  return q8_0_dot(w_row, act_row, n);
}

void dot_rows_q8_0_avx512(const uint8_t* w, size_t w_stride, int64_t n_rows, const void* act_row,
                          int64_t n, float* y) {
  rows1<q8_0_dot>(w, w_stride, n_rows, act_row, n, y);
}

void dot_rows4_q8_0_avx512(const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                           size_t act_stride, int64_t n, float* y, int64_t y_stride) {
  q8_0_rows4(w, w_stride, n_rows, act, act_stride, n, y, y_stride);
}

}  // namespace llamaserve::cpu
