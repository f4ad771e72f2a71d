// Dot products of 32-element-block weights (Q8_0, Q4_0, Q4_1) with ActBlockQ8_32 rows.
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

namespace {

// Q4_0 / Q4_1 against ActBlockQ8_32x2: two weight blocks per step. Their 16 quant bytes
// sit side by side in one register; the low nibbles of both meet `low`, the high nibbles
// `high`; the int32 lanes 0..3 then belong to the first block and 4..7 to the second.
// PairScales gives {d0, o0, d1, o1} for the two blocks, o = d for Q4_0 and m for Q4_1; times
// the activation's {d0, sum0, d1, sum1} that is the FMA scale and the offset term per block.
// {a0, b0, a1, b1}: the (d, m) or (d, d) halves of two blocks as floats.
inline __m128 q4_1_pair_scales(const BlockQ4_1& w0, const BlockQ4_1& w1) {
  int32_t bits0, bits1;
  std::memcpy(&bits0, &w0.d, sizeof bits0);
  std::memcpy(&bits1, &w1.d, sizeof bits1);
  return _mm_cvtph_ps(_mm_insert_epi32(_mm_cvtsi32_si128(bits0), bits1, 1));
}

inline __m128 q4_0_pair_scales(const BlockQ4_0& w0, const BlockQ4_0& w1) {
  const __m128 d = _mm_cvtph_ps(_mm_insert_epi16(_mm_cvtsi32_si128(w0.d.bits), w1.d.bits, 1));
  return _mm_unpacklo_ps(d, d);  // {d0, d0, d1, d1}
}

// One weight row against NT activation rows (NT tokens): the nibble split and the block
// scales are computed once per pair of blocks and reused for every token. sums[t] receives
// Σ of the first factor, offsets[t] Σ of the second factor times the activation sums.
template <typename Block, __m128 (*PairScales)(const Block&, const Block&), int NT>
inline void q4_row(const Block* w, const ActBlockQ8_32x2* const* x, int64_t n_blocks, float* sums,
                   float* offsets) {
  const __m256i spread = _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2);
  __m256 acc[NT];
  __m128 off[NT];  // lanes 1 and 3
  for (int t = 0; t < NT; ++t) {
    acc[t] = _mm256_setzero_ps();
    off[t] = _mm_setzero_ps();
  }
  for (int64_t b = 0; b < n_blocks; b += 2) {
    // The last block of an odd count: the pair's second activation half is zero; any valid
    // weight block stands in for the missing one.
    const Block& w1 = b + 1 < n_blocks ? w[b + 1] : w[b];
    const __m256i bytes = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(w1.qs),
                                              reinterpret_cast<const __m128i*>(w[b].qs));
    const __m256i low = low_nibbles(bytes);
    const __m256i high = high_nibbles(bytes);
    const __m128 scales = PairScales(w[b], w1);
    for (int t = 0; t < NT; ++t) {
      const ActBlockQ8_32x2& xp = x[t][b / 2];
      const __m256i p =
          _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(low, load32(xp.low)),
                                             _mm256_maddubs_epi16(high, load32(xp.high))),
                            _mm256_set1_epi16(1));
      const __m128 s = _mm_mul_ps(scales, _mm_loadu_ps(xp.scale_sum));
      acc[t] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(_mm256_castps128_ps256(s), spread),
                               _mm256_cvtepi32_ps(p), acc[t]);
      off[t] = _mm_add_ps(off[t], s);
    }
  }
  for (int t = 0; t < NT; ++t) {
    const __m128 odd = _mm_movehdup_ps(off[t]);
    offsets[t] = _mm_cvtss_f32(_mm_add_ss(odd, _mm_movehl_ps(odd, odd)));
    sums[t] = hsum(acc[t]);
  }
}

}  // namespace

// w = d * (q - 8): Σ w x = d * dx * Σ q qx - 8 * d * (dx * Σ qx).
float dot_q4_0(const void* w_row, const void* act_row, int64_t n) {
  const auto* x = static_cast<const ActBlockQ8_32x2*>(act_row);
  float sum, offset;
  q4_row<BlockQ4_0, q4_0_pair_scales, 1>(static_cast<const BlockQ4_0*>(w_row), &x, n / 32, &sum,
                                         &offset);
  return std::fma(-8.0f, offset, sum);  // fma spelled out (see dot_float.cc)
}

// w = d * q + m: Σ w x = d * dx * Σ q qx + m * (dx * Σ qx).
float dot_q4_1(const void* w_row, const void* act_row, int64_t n) {
  const auto* x = static_cast<const ActBlockQ8_32x2*>(act_row);
  float sum, offset;
  q4_row<BlockQ4_1, q4_1_pair_scales, 1>(static_cast<const BlockQ4_1*>(w_row), &x, n / 32, &sum,
                                         &offset);
  return sum + offset;
}

void dot_rows4_q4_0(const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                    size_t act_stride, int64_t n, float* y, int64_t y_stride) {
  const ActBlockQ8_32x2* x[4];
  for (int t = 0; t < 4; ++t) x[t] = reinterpret_cast<const ActBlockQ8_32x2*>(act + t * act_stride);
  for (int64_t r = 0; r < n_rows; ++r) {
    float sums[4], offsets[4];
    q4_row<BlockQ4_0, q4_0_pair_scales, 4>(reinterpret_cast<const BlockQ4_0*>(w + r * w_stride), x,
                                           n / 32, sums, offsets);
    for (int t = 0; t < 4; ++t) y[t * y_stride + r] = std::fma(-8.0f, offsets[t], sums[t]);
  }
}

void dot_rows4_q4_1(const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                    size_t act_stride, int64_t n, float* y, int64_t y_stride) {
  const ActBlockQ8_32x2* x[4];
  for (int t = 0; t < 4; ++t) x[t] = reinterpret_cast<const ActBlockQ8_32x2*>(act + t * act_stride);
  for (int64_t r = 0; r < n_rows; ++r) {
    float sums[4], offsets[4];
    q4_row<BlockQ4_1, q4_1_pair_scales, 4>(reinterpret_cast<const BlockQ4_1*>(w + r * w_stride), x,
                                           n / 32, sums, offsets);
    for (int t = 0; t < 4; ++t) y[t * y_stride + r] = sums[t] + offsets[t];
  }
}

void dot_rows_q8_0(const uint8_t* w, size_t w_stride, int64_t n_rows, const void* act_row,
                   int64_t n, float* y) {
  dot_rows<dot_q8_0>(w, w_stride, n_rows, act_row, n, y);
}

void dot_rows_q4_0(const uint8_t* w, size_t w_stride, int64_t n_rows, const void* act_row,
                   int64_t n, float* y) {
  dot_rows<dot_q4_0>(w, w_stride, n_rows, act_row, n, y);
}

void dot_rows_q4_1(const uint8_t* w, size_t w_stride, int64_t n_rows, const void* act_row,
                   int64_t n, float* y) {
  dot_rows<dot_q4_1>(w, w_stride, n_rows, act_row, n, y);
}

}  // namespace llamaserve::cpu
