// AVX-512 dot products of K-quant weights (Q5_K, Q6_K; Q4_K goes packed) with ActBlockQ8_256 rows:
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

// Q6_K: w = d * scale[g] * (q - 32), q in [0, 63], the -32 folded in through the group sums.
// Half h of a super-block: ql[64h..64h+63] holds the low 4 bits of quarters 0 and 1 (low
// nibbles of its two 32-byte rows) and 2 and 3 (high nibbles); qh[32h..32h+31] holds the top
// 2 bits of quarter k at bits 2k, 2k+1. Quarter k covers activation bytes 128h + 32k..+31,
// with scale 8h + 2k for its first 16 elements and 8h + 2k + 1 for the rest.
template <int NT>
LS_AVX512 void q6_k_row(const BlockQ6_K* w, const ActBlockQ8_256* const* x, int64_t n_blocks,
                        float* out) {
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i low2 = _mm512_set1_epi8(3);
  // Per 16-bit lane, the right shift that brings quarter k's two bits down: quarters 0 | 1
  // and 2 | 3 in the two halves.
  const __m512i shift[2] = {_mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1),
                            _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1)};
  // Four lanes per scale: scales g, g + 1, g + 2, g + 3 of two quarters.
  const __m512i scale_spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const BlockQ6_K& blk = w[b];
    // The 16 signed scales as int16, zero-extended into int32 lanes (the high int16 must be
    // zero for vpdpwssd, see the top of the file).
    const __m512i scales16 = _mm512_cvtepu16_epi32(
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales))));
    __m512i sum[NT];
    int32_t offset[NT];
    for (int t = 0; t < NT; ++t) {
      offset[t] = 0;
      for (int g = 0; g < 16; ++g) offset[t] += blk.scales[g] * x[t][b].group_sums[g];
      sum[t] = _mm512_setzero_si512();
    }
    for (int half = 0; half < 2; ++half) {
      const __m512i low_bytes = _mm512_loadu_si512(blk.ql + 64 * half);
      const __m512i high_bytes = v::broadcast32(load32(blk.qh + 32 * half));
      for (int pair = 0; pair < 2; ++pair) {
        const __m512i low = pair == 0 ? _mm512_and_si512(low_bytes, low4)
                                      : _mm512_and_si512(_mm512_srli_epi16(low_bytes, 4), low4);
        // The 16-bit shift moves bits of the neighbouring byte into the top, which the mask
        // drops.
        const __m512i high2 = _mm512_and_si512(_mm512_srlv_epi16(high_bytes, shift[pair]), low2);
        const __m512i q = _mm512_or_si512(low, _mm512_slli_epi16(high2, 4));
        const int g = 8 * half + 4 * pair;
        const __m512i scales = _mm512_permutexvar_epi32(
            _mm512_add_epi32(scale_spread, _mm512_set1_epi32(g)), scales16);
        for (int t = 0; t < NT; ++t) {
          sum[t] = scaled_dot(sum[t], q, x[t][b].qs + 128 * half + 64 * pair, scales);
        }
      }
    }
    const float d = to_f32(blk.d);
    for (int t = 0; t < NT; ++t) {
      const __m256i total =
          _mm256_add_epi32(fold(sum[t]), _mm256_setr_epi32(-32 * offset[t], 0, 0, 0, 0, 0, 0, 0));
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * x[t][b].d), _mm256_cvtepi32_ps(total), acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t] = hsum(acc[t]);
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

float dot_q6_k_avx512(const void* w_row, const void* act_row, int64_t n) {
  return dot1<BlockQ6_K, q6_k_row<1>>(w_row, act_row, n);
}

void dot_rows_q5_k_avx512(const uint8_t* w, size_t w_stride, int64_t n_rows, const void* act_row,
                          int64_t n, float* y) {
  rows1<BlockQ5_K, q5_k_row<1>>(w, w_stride, n_rows, act_row, n, y);
}

void dot_rows_q6_k_avx512(const uint8_t* w, size_t w_stride, int64_t n_rows, const void* act_row,
                          int64_t n, float* y) {
  rows1<BlockQ6_K, q6_k_row<1>>(w, w_stride, n_rows, act_row, n, y);
}

void dot_rows4_q5_k_avx512(const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                           size_t act_stride, int64_t n, float* y, int64_t y_stride) {
  rows4<BlockQ5_K, q5_k_row<4>>(w, w_stride, n_rows, act, act_stride, n, y, y_stride);
}

void dot_rows4_q6_k_avx512(const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                           size_t act_stride, int64_t n, float* y, int64_t y_stride) {
  rows4<BlockQ6_K, q6_k_row<4>>(w, w_stride, n_rows, act, act_stride, n, y, y_stride);
}

}  // namespace llamaserve::cpu
