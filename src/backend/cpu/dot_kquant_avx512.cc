// AVX-512 dot products of Q5_K weights (Q4_K and Q6_K go packed) with ActBlockQ8_256 rows:
// dot_kquant.cc's kernels with 512-bit integer work. Each step covers 64 elements: the two
// 32-element halves (sub-blocks, or Q6_K quarters) sit in lanes 0..7 and 8..15; vpdpbusd sums
// their byte products per int32 lane and vpdpwssd multiplies each lane by its scale and adds
// it up (the scales sit in the low int16 of each lane, the high int16 zero, so the products'
// sign bits meet zero: exact, |lane| <= 4 * 63 * 128 fits int16). At the end of a
// super-block the two halves are added, which gives the AVX2 kernel's eight int32 lanes
// exactly; from there the float work is the AVX2 kernel's, so the results are the same bits
// (dot_avx512.h).

// First: it includes immintrin.h in its own way (see there).
#include "backend/cpu/simd_avx512.h"

#include <cmath>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/dot_avx512.h"
#include "backend/cpu/kquant_scales.h"
#include "backend/cpu/simd.h"
#include "quant/blocks.h"

namespace llamaserve::cpu {
namespace {

namespace v = avx512;

// Lanes 0..7 plus lanes 8..15: the AVX2 kernels' lanes.
LS_AVX512 inline __m256i fold(__m512i v) {
  return _mm256_add_epi32(v::low_half(v), v::high_half(v));
}

// The 64 4-bit values of 32 bytes: low nibbles in bytes 0..31, high nibbles in bytes 32..63.
LS_AVX512 inline __m512i split_nibbles(__m256i bytes) {
  const __m512i both = v::broadcast32(bytes);
  const __m512i shifted = _mm512_mask_srli_epi16(both, 0xffff0000u, both, 4);
  return _mm512_and_si512(shifted, _mm512_set1_epi8(0x0f));
}

// sum + scale * Σ4 q x per lane: q unsigned (< 64), x the activation bytes.
LS_AVX512 inline __m512i scaled_dot(__m512i sum, __m512i q, const int8_t* x, __m512i scales) {
  const __m512i products = v::dpbusd(_mm512_setzero_si512(), q, _mm512_loadu_si512(x));
  return _mm512_dpwssd_epi32(sum, products, scales);
}

// Q4_K / Q5_K: chunk c of a super-block is 32 quant bytes, whose low nibbles are sub-block 2c
// and high nibbles sub-block 2c + 1, i.e. activation bytes 64c..64c+63 in order. `scales8`
// holds the eight sub-block scales in int32 lanes 0..7; the result has scale 2c in lanes
// 0..7 and 2c + 1 in lanes 8..15.
LS_AVX512 inline __m512i chunk_scales(__m512i scales8, int c) {
  const __m512i index =
      _mm512_inserti64x4(_mm512_set1_epi32(2 * c), _mm256_set1_epi32(2 * c + 1), 1);
  return _mm512_permutexvar_epi32(index, scales8);
}

LS_AVX512 inline __m512i sub_block_scales(const ScalesMins& sm) {
  return _mm512_castsi256_si512(
      _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sm.scale))));
}

// The K-quant row kernels take NT activation rows (NT tokens); out[t] = Σ_i w[i] x_t[i].
template <int NT>
LS_AVX512 void q5_k_row(const BlockQ5_K* w, const ActBlockQ8_256* const* x, int64_t n_blocks,
                        float* out) {
  const __m512i bit4 = _mm512_set1_epi8(16);
  __m256 acc[NT];
  float mins[NT] = {};
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const ScalesMins sm = unpack_scales(w[b].scales);
    const __m512i scales8 = sub_block_scales(sm);
    const __m512i high = v::broadcast32(load32(w[b].qh));
    __m512i sum[NT];
    for (int t = 0; t < NT; ++t) sum[t] = _mm512_setzero_si512();
    for (int c = 0; c < 4; ++c) {
      // Bit j of qh[l] is bit 4 of sub-block j's element l: bit 2c for the low nibbles (bytes
      // 0..31), bit 2c + 1 for the high nibbles (bytes 32..63). The nibbles are < 16, so adding
      // 16 sets bit 4.
      const __m512i bit =
          _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << (2 * c))),
                             _mm256_set1_epi8(static_cast<char>(1 << (2 * c + 1))), 1);
      __m512i q = split_nibbles(load32(w[b].qs + 32 * c));
      q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(high, bit), q, bit4);
      const __m512i scales = chunk_scales(scales8, c);
      for (int t = 0; t < NT; ++t) sum[t] = scaled_dot(sum[t], q, x[t][b].qs + 64 * c, scales);
    }
    const float d = to_f32(w[b].d), dmin = to_f32(w[b].dmin);
    for (int t = 0; t < NT; ++t) {
      acc[t] =
          _mm256_fmadd_ps(_mm256_set1_ps(d * x[t][b].d), _mm256_cvtepi32_ps(fold(sum[t])), acc[t]);
      // fma spelled out, so that every path rounds alike (see dot_float.cc).
      mins[t] =
          std::fma(dmin * x[t][b].d, static_cast<float>(min_correction(sm, x[t][b])), mins[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t] = hsum(acc[t]) - mins[t];
}

template <typename Block, void (*Row)(const Block*, const ActBlockQ8_256* const*, int64_t, float*)>
LS_AVX512 float dot1(const void* w_row, const void* act_row, int64_t n) {
  const auto* x = static_cast<const ActBlockQ8_256*>(act_row);
  float out;
  Row(static_cast<const Block*>(w_row), &x, n / kQK_K, &out);
  return out;
}

template <typename Block, void (*Row)(const Block*, const ActBlockQ8_256* const*, int64_t, float*)>
LS_AVX512 void rows1(const uint8_t* w, size_t w_stride, int64_t n_rows, const void* act_row,
                     int64_t n, float* y) {
  const auto* x = static_cast<const ActBlockQ8_256*>(act_row);
  for (int64_t r = 0; r < n_rows; ++r) {
    Row(reinterpret_cast<const Block*>(w + static_cast<size_t>(r) * w_stride), &x, n / kQK_K,
        &y[r]);
  }
}

// Row r of w against four activation rows, written to y[t * y_stride + r].
template <typename Block, void (*Row)(const Block*, const ActBlockQ8_256* const*, int64_t, float*)>
LS_AVX512 void rows4(const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                     size_t act_stride, int64_t n, float* y, int64_t y_stride) {
  const ActBlockQ8_256* x[4];
  for (int t = 0; t < 4; ++t) x[t] = reinterpret_cast<const ActBlockQ8_256*>(act + t * act_stride);
  for (int64_t r = 0; r < n_rows; ++r) {
    float out[4];
    Row(reinterpret_cast<const Block*>(w + r * w_stride), x, n / kQK_K, out);
    for (int t = 0; t < 4; ++t) y[t * y_stride + r] = out[t];
  }
}

}  // namespace

// Plain entry points (see dot_packed_avx512.cc), each passing on to its AVX-512 body.
float dot_q5_k_avx512(const void* w_row, const void* act_row, int64_t n) {
  return dot1<BlockQ5_K, q5_k_row<1>>(w_row, act_row, n);
}

void dot_rows_q5_k_avx512(const uint8_t* w, size_t w_stride, int64_t n_rows, const void* act_row,
                          int64_t n, float* y) {
  rows1<BlockQ5_K, q5_k_row<1>>(w, w_stride, n_rows, act_row, n, y);
}

void dot_rows4_q5_k_avx512(const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                           size_t act_stride, int64_t n, float* y, int64_t y_stride) {
  rows4<BlockQ5_K, q5_k_row<4>>(w, w_stride, n_rows, act, act_stride, n, y, y_stride);
}

}  // namespace llamaserve::cpu
