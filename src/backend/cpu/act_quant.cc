#include "backend/cpu/act_quant.h"

#include <cmath>
#include <cstring>

#include "backend/cpu/simd.h"

namespace llamaserve::cpu {
namespace {

// Rounds 32 floats times `inv_scale` to int8 (nearest, ties to even as cvtps does) and
// returns them packed in element order.
inline __m256i round_to_i8x32(const float* x, __m256 inv_scale) {
  __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), inv_scale));
  __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), inv_scale));
  __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), inv_scale));
  __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), inv_scale));
  // packs work per 128-bit lane; the permute restores element order.
  __m256i s01 = _mm256_packs_epi32(i0, i1);
  __m256i s23 = _mm256_packs_epi32(i2, i3);
  __m256i b = _mm256_packs_epi16(s01, s23);
  return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

inline __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

float absmax(const float* x, int64_t n) {
  __m256 m = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x + i)));
  return hmax(m);
}

// Sum of 16 int8 values as int32, per 16-byte half of v: {sum(v[0..15]), sum(v[16..31])}.
inline void sum_halves(__m256i v, int32_t* lo, int32_t* hi) {
  __m256i widened =
      _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), v), _mm256_set1_epi16(1));
  __m128i a = _mm256_castsi256_si128(widened);
  __m128i b = _mm256_extracti128_si256(widened, 1);
  a = _mm_hadd_epi32(a, a);
  a = _mm_hadd_epi32(a, a);
  b = _mm_hadd_epi32(b, b);
  b = _mm_hadd_epi32(b, b);
  *lo = _mm_cvtsi128_si32(a);
  *hi = _mm_cvtsi128_si32(b);
}

void quantize_q8_32(const float* x, ActBlockQ8_32* out, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32) {
    const float amax = absmax(x, 32);
    const float d = amax / 127.0f;
    const __m256 inv = _mm256_set1_ps(d > 0.0f ? 1.0f / d : 0.0f);
    const __m256i q = round_to_i8x32(x, inv);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].qs), q);
    int32_t lo, hi;
    sum_halves(q, &lo, &hi);
    out[b].d = d;
    out[b].sum = d * static_cast<float>(lo + hi);
  }
}

void quantize_q8_32_planar(const float* x, void* out, int64_t n) {
  const int64_t n_blocks = n / 32;
  const ActRowQ8_32Planar row = planar_row(out, n_blocks);
  for (int64_t b = 0; b < n_blocks; ++b) {
    ActBlockQ8_32 block;
    quantize_q8_32(x + 32 * b, &block, 32);
    std::memcpy(row.qs + 32 * b, block.qs, 32);
    row.d[b] = block.d;
    row.sum[b] = block.sum;
  }
}

void quantize_q8_256(const float* x, ActBlockQ8_256* out, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, x += 256) {
    const float amax = absmax(x, 256);
    const float d = amax / 127.0f;
    const __m256 inv = _mm256_set1_ps(d > 0.0f ? 1.0f / d : 0.0f);
    out[b].d = d;
    for (int j = 0; j < 8; ++j) {
      const __m256i q = round_to_i8x32(x + 32 * j, inv);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].qs + 32 * j), q);
      int32_t lo, hi;
      sum_halves(q, &lo, &hi);
      out[b].group_sums[2 * j] = static_cast<int16_t>(lo);
      out[b].group_sums[2 * j + 1] = static_cast<int16_t>(hi);
    }
  }
}

void quantize_q8_32x2(const float* x, ActBlockQ8_32x2* out, int64_t n) {
  const int64_t n_blocks = n / 32;
  for (int64_t pair = 0; pair < (n_blocks + 1) / 2; ++pair) {
    ActBlockQ8_32 blocks[2] = {};
    quantize_q8_32(x + 64 * pair, blocks, 2 * pair + 1 < n_blocks ? 64 : 32);
    ActBlockQ8_32x2& p = out[pair];
    for (int i = 0; i < 2; ++i) {
      p.scale_sum[2 * i] = blocks[i].d;
      p.scale_sum[2 * i + 1] = blocks[i].sum;
      std::memcpy(p.low + 16 * i, blocks[i].qs, 16);
      std::memcpy(p.high + 16 * i, blocks[i].qs + 16, 16);
    }
  }
}

}  // namespace

ActRowQ8_32Planar planar_row(void* row, int64_t n_blocks) {
  auto* codes = static_cast<int8_t*>(row);
  auto* scales = reinterpret_cast<float*>(codes + 32 * n_blocks);
  return {codes, scales, scales + n_blocks};
}

size_t act_row_bytes(ActFormat format, int64_t n) {
  switch (format) {
    case ActFormat::kF32: return static_cast<size_t>(n) * sizeof(float);
    case ActFormat::kQ8_32: return static_cast<size_t>(n / 32) * sizeof(ActBlockQ8_32);
    case ActFormat::kQ8_32x2:
      return static_cast<size_t>((n / 32 + 1) / 2) * sizeof(ActBlockQ8_32x2);
    case ActFormat::kQ8_256: return static_cast<size_t>(n / 256) * sizeof(ActBlockQ8_256);
    case ActFormat::kQ8_32Planar:
      return (static_cast<size_t>(n / 32) * sizeof(ActBlockQ8_32) + 63) / 64 * 64;
  }
  return 0;
}

void quantize_act_row(ActFormat format, const float* x, void* out, int64_t n) {
  switch (format) {
    case ActFormat::kF32: std::memcpy(out, x, static_cast<size_t>(n) * sizeof(float)); return;
    case ActFormat::kQ8_32: quantize_q8_32(x, static_cast<ActBlockQ8_32*>(out), n); return;
    case ActFormat::kQ8_32x2: quantize_q8_32x2(x, static_cast<ActBlockQ8_32x2*>(out), n); return;
    case ActFormat::kQ8_256: quantize_q8_256(x, static_cast<ActBlockQ8_256*>(out), n); return;
    case ActFormat::kQ8_32Planar: quantize_q8_32_planar(x, out, n); return;
  }
}

// The scalar versions round half to even like the SIMD ones (nearbyint under the default
// rounding mode), so both produce the same bytes.
void quantize_act_row_q8_32_ref(const float* x, ActBlockQ8_32* out, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + 32 * b;
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
    const float d = amax / 127.0f;
    const float inv = d > 0.0f ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      out[b].qs[i] = static_cast<int8_t>(std::nearbyint(xb[i] * inv));
      sum += out[b].qs[i];
    }
    out[b].d = d;
    out[b].sum = d * static_cast<float>(sum);
  }
}

void quantize_act_row_q8_256_ref(const float* x, ActBlockQ8_256* out, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b) {
    const float* xb = x + 256 * b;
    float amax = 0.0f;
    for (int i = 0; i < 256; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
    const float d = amax / 127.0f;
    const float inv = d > 0.0f ? 1.0f / d : 0.0f;
    out[b].d = d;
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int i = 16 * g; i < 16 * g + 16; ++i) {
        out[b].qs[i] = static_cast<int8_t>(std::nearbyint(xb[i] * inv));
        sum += out[b].qs[i];
      }
      out[b].group_sums[g] = static_cast<int16_t>(sum);
    }
  }
}

}  // namespace llamaserve::cpu
