// Dot products of 32-element-block weights (Q8_0, Q4_0, Q4_1) with ActBlockQ8_32 rows.
// Integer products per block (maddubs/madd), then one float FMA per block for the scales.
// The block scales are converted two at a time with F16C and multiplied with the activation
// block's (d, sum) pair in one SSE multiply.
#include <cstring>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/dot.h"
#include "backend/cpu/simd.h"
#include "quant/blocks.h"

namespace llamaserve::cpu {
namespace {

inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

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

float dot_q8_0(const void* w_row, const void* act_row, int64_t n) {
  const auto* w = static_cast<const BlockQ8_0*>(w_row);
  const auto* x = static_cast<const ActBlockQ8_32*>(act_row);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const int64_t n_blocks = n / 32;
  int64_t b = 0;
  for (; b + 2 <= n_blocks; b += 2) {
    const __m256i p0 = dot_s8_s8(load32(w[b].qs), load32(x[b].qs));
    const __m256i p1 = dot_s8_s8(load32(w[b + 1].qs), load32(x[b + 1].qs));
    acc0 = int_dot_scaled(p0, _mm_mul_ss(broadcast_half(w[b].d), act_scale_sum(x[b])), acc0);
    acc1 =
        int_dot_scaled(p1, _mm_mul_ss(broadcast_half(w[b + 1].d), act_scale_sum(x[b + 1])), acc1);
  }
  for (; b < n_blocks; ++b) {
    const __m256i p = dot_s8_s8(load32(w[b].qs), load32(x[b].qs));
    acc0 = int_dot_scaled(p, _mm_mul_ss(broadcast_half(w[b].d), act_scale_sum(x[b])), acc0);
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

namespace {

// Q4_0 / Q4_1 against ActBlockQ8_32x2: two weight blocks per step. Their 16 quant bytes
// sit side by side in one register; the low nibbles of both meet `low`, the high nibbles
// `high`; the int32 lanes 0..3 then belong to the first block and 4..7 to the second.
// PairScales gives {d0, o0, d1, o1} for the two blocks, o = d for Q4_0 and m for Q4_1; times
// the activation's {d0, sum0, d1, sum1} that is the FMA scale and the offset term per block.
inline __m256i q4_pair_products(const uint8_t* qs0, const uint8_t* qs1, const ActBlockQ8_32x2& x) {
  const __m256i bytes = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(qs1),
                                            reinterpret_cast<const __m128i*>(qs0));
  const __m256i low = _mm256_maddubs_epi16(low_nibbles(bytes), load32(x.low));
  const __m256i high = _mm256_maddubs_epi16(high_nibbles(bytes), load32(x.high));
  return _mm256_madd_epi16(_mm256_add_epi16(low, high), _mm256_set1_epi16(1));
}

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

// Σ over the row; `offset` receives Σ of the second factor times the activation sums.
template <typename Block, __m128 (*PairScales)(const Block&, const Block&)>
inline float q4_row(const Block* w, const ActBlockQ8_32x2* x, int64_t n_blocks, float* offset) {
  const __m256i spread = _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m128 offsets = _mm_setzero_ps();  // lanes 1 and 3
  int64_t b = 0;
  for (; b + 4 <= n_blocks; b += 4) {
    const ActBlockQ8_32x2& x0 = x[b / 2];
    const ActBlockQ8_32x2& x1 = x[b / 2 + 1];
    const __m128 s0 = _mm_mul_ps(PairScales(w[b], w[b + 1]), _mm_loadu_ps(x0.scale_sum));
    const __m128 s1 = _mm_mul_ps(PairScales(w[b + 2], w[b + 3]), _mm_loadu_ps(x1.scale_sum));
    const __m256i p0 = q4_pair_products(w[b].qs, w[b + 1].qs, x0);
    const __m256i p1 = q4_pair_products(w[b + 2].qs, w[b + 3].qs, x1);
    acc0 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(_mm256_castps128_ps256(s0), spread),
                           _mm256_cvtepi32_ps(p0), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(_mm256_castps128_ps256(s1), spread),
                           _mm256_cvtepi32_ps(p1), acc1);
    offsets = _mm_add_ps(offsets, _mm_add_ps(s0, s1));
  }
  for (; b + 2 <= n_blocks; b += 2) {
    const ActBlockQ8_32x2& xp = x[b / 2];
    const __m128 s = _mm_mul_ps(PairScales(w[b], w[b + 1]), _mm_loadu_ps(xp.scale_sum));
    const __m256i p = q4_pair_products(w[b].qs, w[b + 1].qs, xp);
    acc0 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(_mm256_castps128_ps256(s), spread),
                           _mm256_cvtepi32_ps(p), acc0);
    offsets = _mm_add_ps(offsets, s);
  }
  if (b < n_blocks) {
    // The last block of an odd count: the pair's second half is zero; reuse the first.
    const ActBlockQ8_32x2& xp = x[b / 2];
    const __m128 s = _mm_mul_ps(PairScales(w[b], w[b]), _mm_loadu_ps(xp.scale_sum));
    const __m256i p = q4_pair_products(w[b].qs, w[b].qs, xp);
    acc0 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(_mm256_castps128_ps256(s), spread),
                           _mm256_cvtepi32_ps(p), acc0);
    offsets = _mm_add_ps(offsets, s);
  }
  // Offsets of lanes 1 and 3.
  const __m128 odd = _mm_movehdup_ps(offsets);
  *offset = _mm_cvtss_f32(_mm_add_ss(odd, _mm_movehl_ps(odd, odd)));
  return hsum(_mm256_add_ps(acc0, acc1));
}

}  // namespace

// w = d * (q - 8): Σ w x = d * dx * Σ q qx - 8 * d * (dx * Σ qx).
float dot_q4_0(const void* w_row, const void* act_row, int64_t n) {
  float offset;
  const float sum = q4_row<BlockQ4_0, q4_0_pair_scales>(
      static_cast<const BlockQ4_0*>(w_row), static_cast<const ActBlockQ8_32x2*>(act_row), n / 32,
      &offset);
  return sum - 8.0f * offset;
}

// w = d * q + m: Σ w x = d * dx * Σ q qx + m * (dx * Σ qx).
float dot_q4_1(const void* w_row, const void* act_row, int64_t n) {
  float offset;
  const float sum = q4_row<BlockQ4_1, q4_1_pair_scales>(
      static_cast<const BlockQ4_1*>(w_row), static_cast<const ActBlockQ8_32x2*>(act_row), n / 32,
      &offset);
  return sum + offset;
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
