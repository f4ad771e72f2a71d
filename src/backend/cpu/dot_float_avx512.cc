// AVX-512 dot products of float-like weight rows (F32, F16, BF16) with float activations.
//
// dot_float.cc keeps four 8-lane accumulators, acc0..acc3 for elements i..i+7, +8, +16 and
// +24 of every 32; here acc01 = {acc0, acc1} and acc23 = {acc2, acc3} are 16-lane registers
// that take the same products in the same order, and the tail and the reduction are the AVX2
// kernel's: the results are the same bits (dot_avx512.h). For one token that halves the
// instructions but keeps the AVX2 kernel's two FMA chains per 32 elements, whose latency
// bounds the loop; the four-token version (prompt passes) loads and converts each weight
// vector once for four tokens and runs eight independent chains.
//
// BF16 stays a shift into a float, as in dot_float.cc: vdpbf16ps would round the activations
// to bf16 as well, a different (less exact) result.

// First: it includes immintrin.h in its own way (see there).
#include "backend/cpu/simd_avx512.h"

#include <cmath>

#include "backend/cpu/dot_avx512.h"
#include "backend/cpu/simd.h"
#include "quant/blocks.h"

namespace llamaserve::cpu {
namespace {

namespace v = avx512;

LS_AVX512 inline __m512 load_f32x16(const float* p) { return _mm512_loadu_ps(p); }
LS_AVX512 inline __m512 load_f16x16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
LS_AVX512 inline __m512 load_bf16x16(const uint16_t* p) {
  const __m512i wide =
      _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}

// dot_float.cc's 8-element loads and scalar conversions, for the tails.
inline __m256 load_f32x8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load_bf16x8(const uint16_t* p) {
  __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
inline float scalar_f32(float v) { return v; }
inline float scalar_f16(uint16_t v) { return f16_to_f32(v); }
inline float scalar_bf16(uint16_t v) { return bf16_to_float(BF16{v}); }

// What dot_float.cc does after its 32-element loop: 8-element steps into acc0, the sum
// (acc0 + acc1) + (acc2 + acc3), then the last n % 8 elements one at a time.
template <typename Elem, __m256 (*Load8)(const Elem*), float (*Scalar)(Elem)>
LS_AVX512 inline float finish(__m512 acc01, __m512 acc23, const Elem* w, const float* x, int64_t i,
                              int64_t n) {
  __m256 acc0 = v::low_half(acc01);
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(Load8(w + i), _mm256_loadu_ps(x + i), acc0);
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(acc0, v::high_half(acc01)),
                                 _mm256_add_ps(v::low_half(acc23), v::high_half(acc23))));
  // An explicit fma, not `sum += w * x`: the compiler may vectorize that loop's products
  // (rounded apart from the sums) for some lengths and fuse others, differently per target,
  // and the AVX2 and AVX-512 paths must round alike (dot_avx512.h).
  for (; i < n; ++i) sum = std::fma(Scalar(w[i]), x[i], sum);
  return sum;
}

template <typename Elem, __m512 (*Load16)(const Elem*), __m256 (*Load8)(const Elem*),
          float (*Scalar)(Elem)>
LS_AVX512 float dot_one(const void* w_row, const void* act_row, int64_t n) {
  const auto* w = static_cast<const Elem*>(w_row);
  const auto* x = static_cast<const float*>(act_row);
  __m512 acc01 = _mm512_setzero_ps(), acc23 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc01 = _mm512_fmadd_ps(Load16(w + i), _mm512_loadu_ps(x + i), acc01);
    acc23 = _mm512_fmadd_ps(Load16(w + i + 16), _mm512_loadu_ps(x + i + 16), acc23);
  }
  return finish<Elem, Load8, Scalar>(acc01, acc23, w, x, i, n);
}

template <typename Elem, __m512 (*Load16)(const Elem*), __m256 (*Load8)(const Elem*),
          float (*Scalar)(Elem)>
LS_AVX512 void rows_one(const uint8_t* w, size_t w_stride, int64_t n_rows, const void* act_row,
                        int64_t n, float* y) {
  for (int64_t r = 0; r < n_rows; ++r) {
    y[r] = dot_one<Elem, Load16, Load8, Scalar>(w + static_cast<size_t>(r) * w_stride, act_row, n);
  }
}

// Four activation rows (act + t * act_stride, floats): each weight vector is loaded and
// converted once for the four tokens.
template <typename Elem, __m512 (*Load16)(const Elem*), __m256 (*Load8)(const Elem*),
          float (*Scalar)(Elem)>
LS_AVX512 void rows_four(const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                         size_t act_stride, int64_t n, float* y, int64_t y_stride) {
  const float* x[4];
  for (int t = 0; t < 4; ++t) x[t] = reinterpret_cast<const float*>(act + t * act_stride);
  for (int64_t r = 0; r < n_rows; ++r) {
    const auto* wr = reinterpret_cast<const Elem*>(w + static_cast<size_t>(r) * w_stride);
    __m512 acc01[4], acc23[4];
    for (int t = 0; t < 4; ++t) acc01[t] = acc23[t] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
      const __m512 w0 = Load16(wr + i), w1 = Load16(wr + i + 16);
      for (int t = 0; t < 4; ++t) {
        acc01[t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x[t] + i), acc01[t]);
        acc23[t] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x[t] + i + 16), acc23[t]);
      }
    }
    for (int t = 0; t < 4; ++t) {
      y[t * y_stride + r] = finish<Elem, Load8, Scalar>(acc01[t], acc23[t], wr, x[t], i, n);
    }
  }
}

}  // namespace

// Plain entry points (see dot_packed_avx512.cc), each passing on to its AVX-512 body.
float dot_f32_avx512(const void* w_row, const void* act_row, int64_t n) {
  return dot_one<float, load_f32x16, load_f32x8, scalar_f32>(w_row, act_row, n);
}

float dot_f16_avx512(const void* w_row, const void* act_row, int64_t n) {
  return dot_one<uint16_t, load_f16x16, load_f16x8, scalar_f16>(w_row, act_row, n);
}

float dot_bf16_avx512(const void* w_row, const void* act_row, int64_t n) {
  return dot_one<uint16_t, load_bf16x16, load_bf16x8, scalar_bf16>(w_row, act_row, n);
}

void dot_rows_f32_avx512(const uint8_t* w, size_t w_stride, int64_t n_rows, const void* act_row,
                         int64_t n, float* y) {
  rows_one<float, load_f32x16, load_f32x8, scalar_f32>(w, w_stride, n_rows, act_row, n, y);
}

void dot_rows_f16_avx512(const uint8_t* w, size_t w_stride, int64_t n_rows, const void* act_row,
                         int64_t n, float* y) {
  rows_one<uint16_t, load_f16x16, load_f16x8, scalar_f16>(w, w_stride, n_rows, act_row, n, y);
}

void dot_rows_bf16_avx512(const uint8_t* w, size_t w_stride, int64_t n_rows, const void* act_row,
                          int64_t n, float* y) {
  rows_one<uint16_t, load_bf16x16, load_bf16x8, scalar_bf16>(w, w_stride, n_rows, act_row, n, y);
}

void dot_rows4_f32_avx512(const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                          size_t act_stride, int64_t n, float* y, int64_t y_stride) {
  rows_four<float, load_f32x16, load_f32x8, scalar_f32>(w, w_stride, n_rows, act, act_stride, n, y,
                                                        y_stride);
}

void dot_rows4_f16_avx512(const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                          size_t act_stride, int64_t n, float* y, int64_t y_stride) {
  rows_four<uint16_t, load_f16x16, load_f16x8, scalar_f16>(w, w_stride, n_rows, act, act_stride, n,
                                                           y, y_stride);
}

void dot_rows4_bf16_avx512(const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                           size_t act_stride, int64_t n, float* y, int64_t y_stride) {
  rows_four<uint16_t, load_bf16x16, load_bf16x8, scalar_bf16>(w, w_stride, n_rows, act, act_stride,
                                                              n, y, y_stride);
}

}  // namespace llamaserve::cpu
