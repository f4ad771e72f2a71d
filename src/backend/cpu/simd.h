// Small AVX2/FMA/F16C helpers shared by the CPU kernels. The build targets x86-64-v3, so
// these are always available; there is no runtime dispatch.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "quant/blocks.h"

namespace llamaserve::cpu {

inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

// {Σ a0, ..., Σ a7}: the horizontal sums of eight vectors in one.
inline __m256 hsum8(__m256 a0, __m256 a1, __m256 a2, __m256 a3, __m256 a4, __m256 a5, __m256 a6,
                    __m256 a7) {
  const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(a4, a5), _mm256_hadd_ps(a6, a7));
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// The scales of block b of eight Q8_0 rows, as floats.
inline __m256 q8_scales(const BlockQ8_0* const* rows, int64_t b) {
  return _mm256_cvtph_ps(_mm_setr_epi16(
      static_cast<int16_t>(rows[0][b].d.bits), static_cast<int16_t>(rows[1][b].d.bits),
      static_cast<int16_t>(rows[2][b].d.bits), static_cast<int16_t>(rows[3][b].d.bits),
      static_cast<int16_t>(rows[4][b].d.bits), static_cast<int16_t>(rows[5][b].d.bits),
      static_cast<int16_t>(rows[6][b].d.bits), static_cast<int16_t>(rows[7][b].d.bits)));
}

inline int32_t hsum_i32(__m256i v) {
  __m128i lo = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  lo = _mm_add_epi32(lo, _mm_shuffle_epi32(lo, _MM_SHUFFLE(1, 0, 3, 2)));
  lo = _mm_add_epi32(lo, _mm_shuffle_epi32(lo, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(lo);
}

inline float hmax(__m256 v) {
  __m128 lo = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  lo = _mm_max_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_max_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

// 32 unaligned bytes.
inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// 8 consecutive f16 values (stored as bits) to floats.
inline __m256 load_f16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

inline void store_f16x8(uint16_t* p, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

inline float f16_to_f32(uint16_t bits) { return _cvtsh_ss(bits); }
inline uint16_t f32_to_f16(float value) { return _cvtss_sh(value, _MM_FROUND_TO_NEAREST_INT); }
// The hardware conversion (F16C); blocks.h's half_to_float is the portable one.
inline float to_f32(Half h) { return _cvtsh_ss(h.bits); }

// 32 unsigned bytes times 32 signed bytes, summed in pairs to 16 int16 and then to 8 int32.
// PRECONDITION: |u| * |s| * 2 fits int16 (u <= 63 with s in [-127, 127] is safe).
inline __m256i dot_u8_s8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

// Signed × signed bytes through maddubs: |a| as the unsigned operand, b carrying a's sign.
inline __m256i dot_s8_s8(__m256i a, __m256i b) {
  return dot_u8_s8(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

// 32 bytes holding 64 nibbles -> low nibbles (bytes 0..31 of the low half) and high nibbles.
inline __m256i low_nibbles(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0f)); }
inline __m256i high_nibbles(__m256i v) {
  return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f));
}

}  // namespace llamaserve::cpu
