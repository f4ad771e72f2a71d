// AVX-512 dot products of 32-element-block weights (Q8_0, Q4_0, Q4_1) with ActBlockQ8_32 /
// ActBlockQ8_32x2 rows: dot_q32.cc's kernels with vpdpbusd in place of maddubs + madd
// (+ the sign trick for Q8_0).
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

// Q4_0 / Q4_1 against ActBlockQ8_32x2, two weight blocks per step as in dot_q32.cc: their 16
// quant bytes side by side, low nibbles against `low`, high nibbles against `high`; int32
// lanes 0..3 belong to the first block and 4..7 to the second. The pair scales are
// {d0, o0, d1, o1}, o = d for Q4_0 and m for Q4_1 (the same functions as dot_q32.cc's).
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

// The 32 quant bytes of blocks b and b + 1 (the last block of an odd count stands in for the
// missing one: the activation pair's second half is zero).
template <typename Block>
inline __m256i q4_pair_bytes(const Block* w, int64_t b, int64_t n_blocks, const Block** w1) {
  *w1 = b + 1 < n_blocks ? &w[b + 1] : &w[b];
  return _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>((*w1)->qs),
                             reinterpret_cast<const __m128i*>(w[b].qs));
}

// {Σ offsets} from the lanes 1 and 3 of the per-pair scale products, as dot_q32.cc adds them.
inline float q4_offset(__m128 off) {
  const __m128 odd = _mm_movehdup_ps(off);
  return _mm_cvtss_f32(_mm_add_ss(odd, _mm_movehl_ps(odd, odd)));
}

template <typename Block, __m128 (*PairScales)(const Block&, const Block&)>
LS_AVX512 void q4_row1(const Block* w, const ActBlockQ8_32x2* x, int64_t n_blocks, float* sum,
                       float* offset) {
  const __m256i spread = _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2);
  __m256 acc = _mm256_setzero_ps();
  __m128 off = _mm_setzero_ps();  // lanes 1 and 3
  for (int64_t b = 0; b < n_blocks; b += 2) {
    const Block* w1;
    const __m256i bytes = q4_pair_bytes(w, b, n_blocks, &w1);
    const ActBlockQ8_32x2& xp = x[b / 2];
    const __m256i p =
        v::dpbusd(v::dpbusd(_mm256_setzero_si256(), low_nibbles(bytes), load32(xp.low)),
                  high_nibbles(bytes), load32(xp.high));
    const __m128 s = _mm_mul_ps(PairScales(w[b], *w1), _mm_loadu_ps(xp.scale_sum));
    acc = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(_mm256_castps128_ps256(s), spread),
                          _mm256_cvtepi32_ps(p), acc);
    off = _mm_add_ps(off, s);
  }
  *offset = q4_offset(off);
  *sum = hsum(acc);
}

// Four tokens: acc[k] and off[k] hold tokens 2k (lanes 0..7 / 0..3) and 2k + 1 (8..15 / 4..7).
template <typename Block, __m128 (*PairScales)(const Block&, const Block&)>
LS_AVX512 void q4_row4(const Block* w, const ActBlockQ8_32x2* const* x, int64_t n_blocks,
                       float* sums, float* offsets) {
  // Each token's {d0 * dx0, ., d1 * dx1, .} spread to its four + four lanes.
  const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6);
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  __m256 off[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t b = 0; b < n_blocks; b += 2) {
    const Block* w1;
    const __m512i bytes = v::broadcast32(q4_pair_bytes(w, b, n_blocks, &w1));
    const __m512i low = _mm512_and_si512(bytes, nibble);
    const __m512i high = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), nibble);
    const __m128 scales = PairScales(w[b], *w1);
    const __m256 scales2 = _mm256_set_m128(scales, scales);
    for (int k = 0; k < 2; ++k) {
      const ActBlockQ8_32x2& x0 = x[2 * k][b / 2];
      const ActBlockQ8_32x2& x1 = x[2 * k + 1][b / 2];
      const __m512i p =
          v::dpbusd(v::dpbusd(_mm512_setzero_si512(), low, v::load2x32(x0.low, x1.low)), high,
                    v::load2x32(x0.high, x1.high));
      const __m256 s = _mm256_mul_ps(scales2, _mm256_loadu2_m128(x1.scale_sum, x0.scale_sum));
      acc[k] = _mm512_fmadd_ps(_mm512_permutexvar_ps(spread, _mm512_castps256_ps512(s)),
                               _mm512_cvtepi32_ps(p), acc[k]);
      off[k] = _mm256_add_ps(off[k], s);
    }
  }
  for (int k = 0; k < 2; ++k) {
    offsets[2 * k] = q4_offset(_mm256_castps256_ps128(off[k]));
    offsets[2 * k + 1] = q4_offset(_mm256_extractf128_ps(off[k], 1));
    sums[2 * k] = hsum(v::low_half(acc[k]));
    sums[2 * k + 1] = hsum(v::high_half(acc[k]));
  }
}

// w = d * (q - 8): Σ w x = d * dx * Σ q qx - 8 * d * (dx * Σ qx).
LS_AVX512 float q4_0_dot(const void* w_row, const void* act_row, int64_t n) {
  float sum, offset;
  q4_row1<BlockQ4_0, q4_0_pair_scales>(static_cast<const BlockQ4_0*>(w_row),
                                       static_cast<const ActBlockQ8_32x2*>(act_row), n / 32, &sum,
                                       &offset);
  return std::fma(-8.0f, offset, sum);  // fma spelled out (see dot_float.cc)
}

// w = d * q + m: Σ w x = d * dx * Σ q qx + m * (dx * Σ qx).
LS_AVX512 float q4_1_dot(const void* w_row, const void* act_row, int64_t n) {
  float sum, offset;
  q4_row1<BlockQ4_1, q4_1_pair_scales>(static_cast<const BlockQ4_1*>(w_row),
                                       static_cast<const ActBlockQ8_32x2*>(act_row), n / 32, &sum,
                                       &offset);
  return sum + offset;
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

LS_AVX512 void q4_0_rows4(const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                          size_t act_stride, int64_t n, float* y, int64_t y_stride) {
  const ActBlockQ8_32x2* x[4];
  for (int t = 0; t < 4; ++t) x[t] = reinterpret_cast<const ActBlockQ8_32x2*>(act + t * act_stride);
  for (int64_t r = 0; r < n_rows; ++r) {
    float sums[4], offsets[4];
    q4_row4<BlockQ4_0, q4_0_pair_scales>(reinterpret_cast<const BlockQ4_0*>(w + r * w_stride), x,
                                         n / 32, sums, offsets);
    for (int t = 0; t < 4; ++t) y[t * y_stride + r] = std::fma(-8.0f, offsets[t], sums[t]);
  }
}

LS_AVX512 void q4_1_rows4(const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                          size_t act_stride, int64_t n, float* y, int64_t y_stride) {
  const ActBlockQ8_32x2* x[4];
  for (int t = 0; t < 4; ++t) x[t] = reinterpret_cast<const ActBlockQ8_32x2*>(act + t * act_stride);
  for (int64_t r = 0; r < n_rows; ++r) {
    float sums[4], offsets[4];
    q4_row4<BlockQ4_1, q4_1_pair_scales>(reinterpret_cast<const BlockQ4_1*>(w + r * w_stride), x,
                                         n / 32, sums, offsets);
    for (int t = 0; t < 4; ++t) y[t * y_stride + r] = sums[t] + offsets[t];
  }
}

}  // namespace

// The entry points are plain functions (no target attribute, so that their declarations in
// dot_avx512.h are ordinary ones); each passes straight on to its AVX-512 body.
float dot_q8_0_avx512(const void* w_row, const void* act_row, int64_t n) {
  return q8_0_dot(w_row, act_row, n);
}

float dot_q4_0_avx512(const void* w_row, const void* act_row, int64_t n) {
  return q4_0_dot(w_row, act_row, n);
}

float dot_q4_1_avx512(const void* w_row, const void* act_row, int64_t n) {
  return q4_1_dot(w_row, act_row, n);
}

void dot_rows_q8_0_avx512(const uint8_t* w, size_t w_stride, int64_t n_rows, const void* act_row,
                          int64_t n, float* y) {
  rows1<q8_0_dot>(w, w_stride, n_rows, act_row, n, y);
}

void dot_rows_q4_0_avx512(const uint8_t* w, size_t w_stride, int64_t n_rows, const void* act_row,
                          int64_t n, float* y) {
  rows1<q4_0_dot>(w, w_stride, n_rows, act_row, n, y);
}

void dot_rows_q4_1_avx512(const uint8_t* w, size_t w_stride, int64_t n_rows, const void* act_row,
                          int64_t n, float* y) {
  rows1<q4_1_dot>(w, w_stride, n_rows, act_row, n, y);
}

void dot_rows4_q8_0_avx512(const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                           size_t act_stride, int64_t n, float* y, int64_t y_stride) {
  q8_0_rows4(w, w_stride, n_rows, act, act_stride, n, y, y_stride);
}

void dot_rows4_q4_0_avx512(const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                           size_t act_stride, int64_t n, float* y, int64_t y_stride) {
  q4_0_rows4(w, w_stride, n_rows, act, act_stride, n, y, y_stride);
}

void dot_rows4_q4_1_avx512(const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                           size_t act_stride, int64_t n, float* y, int64_t y_stride) {
  q4_1_rows4(w, w_stride, n_rows, act, act_stride, n, y, y_stride);
}

}  // namespace llamaserve::cpu
