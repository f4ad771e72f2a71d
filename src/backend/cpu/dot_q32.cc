// Dot products of 32-element-block weights (Q8_0, Q4_0, Q4_1) with ActBlockQ8_32 rows.
// Integer products per block (maddubs/madd), one float FMA per block for the scales.
#include "backend/cpu/act_quant.h"
#include "backend/cpu/dot.h"
#include "backend/cpu/simd.h"
#include "quant/blocks.h"

namespace llamaserve::cpu {
namespace {

inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// The 32 nibbles of a Q4_0/Q4_1 block in element order (low nibbles are elements 0..15).
inline __m256i unpack_q4_32(const uint8_t* qs) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(bytes, 4), bytes);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
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
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(to_f32(w[b].d) * x[b].d), _mm256_cvtepi32_ps(p0), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_set1_ps(to_f32(w[b + 1].d) * x[b + 1].d), _mm256_cvtepi32_ps(p1),
                           acc1);
  }
  for (; b < n_blocks; ++b) {
    const __m256i p = dot_s8_s8(load32(w[b].qs), load32(x[b].qs));
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(to_f32(w[b].d) * x[b].d), _mm256_cvtepi32_ps(p), acc0);
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

// w = d * (q - 8): Σ w x = d * dx * Σ q qx - 8 * d * (dx * Σ qx).
float dot_q4_0(const void* w_row, const void* act_row, int64_t n) {
  const auto* w = static_cast<const BlockQ4_0*>(w_row);
  const auto* x = static_cast<const ActBlockQ8_32*>(act_row);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  float offset = 0.0f;
  const int64_t n_blocks = n / 32;
  int64_t b = 0;
  for (; b + 2 <= n_blocks; b += 2) {
    const float d0 = to_f32(w[b].d), d1 = to_f32(w[b + 1].d);
    const __m256i p0 = dot_u8_s8(unpack_q4_32(w[b].qs), load32(x[b].qs));
    const __m256i p1 = dot_u8_s8(unpack_q4_32(w[b + 1].qs), load32(x[b + 1].qs));
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d0 * x[b].d), _mm256_cvtepi32_ps(p0), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d1 * x[b + 1].d), _mm256_cvtepi32_ps(p1), acc1);
    offset += d0 * x[b].sum + d1 * x[b + 1].sum;
  }
  for (; b < n_blocks; ++b) {
    const float d = to_f32(w[b].d);
    const __m256i p = dot_u8_s8(unpack_q4_32(w[b].qs), load32(x[b].qs));
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d * x[b].d), _mm256_cvtepi32_ps(p), acc0);
    offset += d * x[b].sum;
  }
  return hsum(_mm256_add_ps(acc0, acc1)) - 8.0f * offset;
}

// w = d * q + m: Σ w x = d * dx * Σ q qx + m * (dx * Σ qx).
float dot_q4_1(const void* w_row, const void* act_row, int64_t n) {
  const auto* w = static_cast<const BlockQ4_1*>(w_row);
  const auto* x = static_cast<const ActBlockQ8_32*>(act_row);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  float offset = 0.0f;
  const int64_t n_blocks = n / 32;
  int64_t b = 0;
  for (; b + 2 <= n_blocks; b += 2) {
    const __m256i p0 = dot_u8_s8(unpack_q4_32(w[b].qs), load32(x[b].qs));
    const __m256i p1 = dot_u8_s8(unpack_q4_32(w[b + 1].qs), load32(x[b + 1].qs));
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(to_f32(w[b].d) * x[b].d), _mm256_cvtepi32_ps(p0), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_set1_ps(to_f32(w[b + 1].d) * x[b + 1].d), _mm256_cvtepi32_ps(p1),
                           acc1);
    offset += to_f32(w[b].m) * x[b].sum + to_f32(w[b + 1].m) * x[b + 1].sum;
  }
  for (; b < n_blocks; ++b) {
    const __m256i p = dot_u8_s8(unpack_q4_32(w[b].qs), load32(x[b].qs));
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(to_f32(w[b].d) * x[b].d), _mm256_cvtepi32_ps(p), acc0);
    offset += to_f32(w[b].m) * x[b].sum;
  }
  return hsum(_mm256_add_ps(acc0, acc1)) + offset;
}

}  // namespace llamaserve::cpu
