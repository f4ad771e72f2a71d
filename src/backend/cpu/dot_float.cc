// Dot products of float-like weight rows (F32, F16, BF16) with float activations.
#include <cmath>

#include "backend/cpu/dot.h"
#include "backend/cpu/simd.h"
#include "quant/blocks.h"

namespace llamaserve::cpu {
namespace {

inline __m256 load_bf16x8(const uint16_t* p) {
  __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

// Four independent accumulators hide the FMA latency; Load converts 8 weights to floats.
template <typename Elem, __m256 (*Load)(const Elem*), float (*Scalar)(Elem)>
float dot_generic(const Elem* w, const float* x, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm256_fmadd_ps(Load(w + i), _mm256_loadu_ps(x + i), acc0);
    acc1 = _mm256_fmadd_ps(Load(w + i + 8), _mm256_loadu_ps(x + i + 8), acc1);
    acc2 = _mm256_fmadd_ps(Load(w + i + 16), _mm256_loadu_ps(x + i + 16), acc2);
    acc3 = _mm256_fmadd_ps(Load(w + i + 24), _mm256_loadu_ps(x + i + 24), acc3);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(Load(w + i), _mm256_loadu_ps(x + i), acc0);
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
  // An explicit fma, not `sum += w * x`: the compiler may vectorize that loop's products
  // (rounded apart from the sums) for some lengths and fuse others, differently per target,
  // and the AVX2 and AVX-512 paths must round alike (dot_avx512.h).
  for (; i < n; ++i) sum = std::fma(Scalar(w[i]), x[i], sum);
  return sum;
}

inline __m256 load_f32(const float* p) { return _mm256_loadu_ps(p); }
inline float scalar_f32(float v) { return v; }
inline float scalar_f16(uint16_t v) { return f16_to_f32(v); }
inline float scalar_bf16(uint16_t v) { return bf16_to_float(BF16{v}); }

}  // namespace

float dot_f32(const void* w_row, const void* act_row, int64_t n) {
  return dot_generic<float, load_f32, scalar_f32>(static_cast<const float*>(w_row),
                                                  static_cast<const float*>(act_row), n);
}

float dot_f16(const void* w_row, const void* act_row, int64_t n) {
  return dot_generic<uint16_t, load_f16x8, scalar_f16>(static_cast<const uint16_t*>(w_row),
                                                       static_cast<const float*>(act_row), n);
}

float dot_bf16(const void* w_row, const void* act_row, int64_t n) {
  return dot_generic<uint16_t, load_bf16x8, scalar_bf16>(static_cast<const uint16_t*>(w_row),
                                                         static_cast<const float*>(act_row), n);
}

void dot_rows_f32(const uint8_t* w, size_t w_stride, int64_t n_rows, const void* act_row, int64_t n,
                  float* y) {
  dot_rows<dot_f32>(w, w_stride, n_rows, act_row, n, y);
}

void dot_rows_f16(const uint8_t* w, size_t w_stride, int64_t n_rows, const void* act_row, int64_t n,
                  float* y) {
  dot_rows<dot_f16>(w, w_stride, n_rows, act_row, n, y);
}

void dot_rows_bf16(const uint8_t* w, size_t w_stride, int64_t n_rows, const void* act_row,
                   int64_t n, float* y) {
  dot_rows<dot_bf16>(w, w_stride, n_rows, act_row, n, y);
}

}  // namespace llamaserve::cpu
