// Dot products of Q8_0 weights with ActBlockQ8_32 rows (Q4_0 and Q4_1 go packed:
// dot_packed_q4.cc).
// Integer products per block (maddubs/madd), then one float FMA per block for the scales.
// The block scales are converted two at a time with F16C and multiplied with the activation
// block's (d, sum) pair in one SSE multiply.
#include <cmath>
#include <cstring>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/dot.h"
#include "backend/cpu/simd.h"
#include "quant/blocks.h"

namespace llamaserve::cpu {
namespace {

// {x.d, x.sum, 0, 0}
inline __m128 act_scale_sum(const ActBlockQ8_32& x) {
  return _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(&x.d)));
}

// {h, h, h, h} from one stored half.
inline __m128 broadcast_half(const Half& h) {
  return _mm_cvtph_ps(_mm_set1_epi16(static_cast<short>(h.bits)));
}

inline __m256 int_dot_scaled(__m256i products, __m128 scale, __m256 acc) {
  return _mm256_fmadd_ps(_mm256_broadcastss_ps(scale), _mm256_cvtepi32_ps(products), acc);
}

}  // namespace

namespace {

// One Q8_0 row against NT activation rows: |w| and the block scale are computed once per block
// and reused for every token.
template <int NT>
void q8_0_row(const BlockQ8_0* w, const ActBlockQ8_32* const* x, int64_t n_blocks, float* out) {
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const __m256i q = load32(w[b].qs);
    const __m256i magnitude = _mm256_sign_epi8(q, q);
    const __m128 d = broadcast_half(w[b].d);
    for (int t = 0; t < NT; ++t) {
      const __m256i p = dot_u8_s8(magnitude, _mm256_sign_epi8(load32(x[t][b].qs), q));
      acc[t] = int_dot_scaled(p, _mm_mul_ss(d, act_scale_sum(x[t][b])), acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t] = hsum(acc[t]);
}

}  // namespace

float dot_q8_0(const void* w_row, const void* act_row, int64_t n) {
  const auto* x = static_cast<const ActBlockQ8_32*>(act_row);
  float out;
  q8_0_row<1>(static_cast<const BlockQ8_0*>(w_row), &x, n / 32, &out);
  return out;
}

void dot_rows4_q8_0(const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                    size_t act_stride, int64_t n, float* y, int64_t y_stride) {
  const ActBlockQ8_32* x[4];
  for (int t = 0; t < 4; ++t) x[t] = reinterpret_cast<const ActBlockQ8_32*>(act + t * act_stride);
  for (int64_t r = 0; r < n_rows; ++r) {
    float out[4];
    q8_0_row<4>(reinterpret_cast<const BlockQ8_0*>(w + r * w_stride), x, n / 32, out);
    for (int t = 0; t < 4; ++t) y[t * y_stride + r] = out[t];
  }
}

void dot_rows_q8_0(const uint8_t* w, size_t w_stride, int64_t n_rows, const void* act_row,
                   int64_t n, float* y) {
  dot_rows<dot_q8_0>(w, w_stride, n_rows, act_row, n, y);
}

}  // namespace llamaserve::cpu
