// Elementwise and normalisation kernels of the forward pass, SIMD versions. Their plain
// counterparts are in ref_kernels.h; tests compare the two.
#pragma once

#include <cstdint>

#include "backend/cpu/simd.h"

namespace llamaserve::cpu {

// e^x for 8 floats, within ~2 ulp for x in [-87, 88]; inputs outside are clamped (so the
// result never overflows to inf or becomes a denormal).
inline __m256 exp256(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.7f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // r = x - n ln2, with ln2 split in two so that n * ln2_hi is exact.
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  // Taylor series of e^r to degree 7 on |r| <= ln2 / 2.
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i exponent =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(exponent));
}

// y = x / sqrt(mean(x²) + eps) * weight. y may alias x.
void rmsnorm(const float* x, const float* weight, float* y, int64_t n, float eps);

// out = silu(gate) * up, silu(g) = g / (1 + e^-g). out may alias gate or up.
void silu_mul(const float* gate, const float* up, float* out, int64_t n);

// x += y.
void add_inplace(float* x, const float* y, int64_t n);

}  // namespace llamaserve::cpu
