// Dot products of Q5_K weights with ActBlockQ8_256 rows (Q4_K and Q6_K go packed:
// dot_packed_body.h). Per
// super-block: integer products scaled by the 6/8-bit sub-block scales in int32, then one
// float multiply by d * dx; the mins/offsets use the activation's 16-element group sums.
#include <cmath>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/dot.h"
#include "backend/cpu/kquant_scales.h"
#include "backend/cpu/simd.h"
#include "quant/blocks.h"

namespace llamaserve::cpu {
namespace {

// 32 unsigned quants of one sub-block times the activation bytes, times the sub-block scale.
inline __m256i scaled_dot(__m256i q, const int8_t* x, uint8_t scale) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(q, load32(x)), _mm256_set1_epi16(scale));
}

// The K-quant row kernels take NT activation rows (NT tokens): the weight bits of each block
// are unpacked and its scales broadcast once, then multiplied with every token's bytes.
// out[t] = Σ_i w[i] x_t[i].
template <int NT>
void q5_k_row(const BlockQ5_K* w, const ActBlockQ8_256* const* x, int64_t n_blocks, float* out) {
  const __m256i one = _mm256_set1_epi8(1);
  __m256 acc[NT];
  float mins[NT] = {};
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const ScalesMins sm = unpack_scales(w[b].scales);
    const __m256i high = load32(w[b].qh);
    __m256i sum[NT];
    for (int t = 0; t < NT; ++t) sum[t] = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i bytes = load32(w[b].qs + 32 * c);
      // Bit j of qh[l] is bit 4 of sub-block j's element l. The 16-bit shift moves a bit of
      // the neighbouring byte into the top, which the mask drops.
      const __m256i h0 =
          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 2 * c), one), 4);
      const __m256i h1 =
          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 2 * c + 1), one), 4);
      const __m256i q0 = _mm256_or_si256(low_nibbles(bytes), h0);
      const __m256i q1 = _mm256_or_si256(high_nibbles(bytes), h1);
      for (int t = 0; t < NT; ++t) {
        const int8_t* xq = x[t][b].qs + 64 * c;
        sum[t] = _mm256_add_epi32(sum[t], scaled_dot(q0, xq, sm.scale[2 * c]));
        sum[t] = _mm256_add_epi32(sum[t], scaled_dot(q1, xq + 32, sm.scale[2 * c + 1]));
      }
    }
    const float d = to_f32(w[b].d), dmin = to_f32(w[b].dmin);
    for (int t = 0; t < NT; ++t) {
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * x[t][b].d), _mm256_cvtepi32_ps(sum[t]), acc[t]);
      // fma spelled out, so that every path rounds alike (see dot_float.cc).
      mins[t] =
          std::fma(dmin * x[t][b].d, static_cast<float>(min_correction(sm, x[t][b])), mins[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t] = hsum(acc[t]) - mins[t];
}

// Row r of w against four activation rows, written to y[t * y_stride + r].
template <typename Block, void (*Row)(const Block*, const ActBlockQ8_256* const*, int64_t, float*)>
void rows4(const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act, size_t act_stride,
           int64_t n, float* y, int64_t y_stride) {
  const ActBlockQ8_256* x[4];
  for (int t = 0; t < 4; ++t) x[t] = reinterpret_cast<const ActBlockQ8_256*>(act + t * act_stride);
  for (int64_t r = 0; r < n_rows; ++r) {
    float out[4];
    Row(reinterpret_cast<const Block*>(w + r * w_stride), x, n / kQK_K, out);
    for (int t = 0; t < 4; ++t) y[t * y_stride + r] = out[t];
  }
}

}  // namespace

float dot_q5_k(const void* w_row, const void* act_row, int64_t n) {
  const auto* x = static_cast<const ActBlockQ8_256*>(act_row);
  float out;
  q5_k_row<1>(static_cast<const BlockQ5_K*>(w_row), &x, n / kQK_K, &out);
  return out;
}

void dot_rows4_q5_k(const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                    size_t act_stride, int64_t n, float* y, int64_t y_stride) {
  rows4<BlockQ5_K, q5_k_row<4>>(w, w_stride, n_rows, act, act_stride, n, y, y_stride);
}

void dot_rows_q5_k(const uint8_t* w, size_t w_stride, int64_t n_rows, const void* act_row,
                   int64_t n, float* y) {
  dot_rows<dot_q5_k>(w, w_stride, n_rows, act_row, n, y);
}

}  // namespace llamaserve::cpu
