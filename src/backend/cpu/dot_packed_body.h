// The kernels of packed tiles (packed_weight.h), written once for both instruction sets: the
// two files that include this header, dot_packed.cc (AVX2) and dot_packed_avx512.cc (AVX-512
// VNNI), define LS_PACKED_TARGET (the functions' target attribute, empty for AVX2),
// LS_PACKED_VNNI (0 or 1: maddubs + madd, or vpdpbusd) and LS_PACKED_NAME(type) (the entry
// points' names) before including it. Nothing else may include it. Every function here lives
// in an anonymous namespace, so the two files' copies never meet at link time (simd_avx512.h
// says why that matters).
//
// Q4_0 / Q4_1, per block of 32 elements and eight rows: four 32-byte loads, each split into
// its low and high nibbles, each nibble vector multiplied with four activation bytes broadcast
// to every row's lane. Then per token: acc += (d * dx) * Σ and off += o * sx, o = m (Q4_1) or d
// (Q4_0, whose -8 offset is applied once at the end: y = acc - 8 * off). The int32 sums are the
// same on both paths, and so are the float operations and their order: the same bits.
#pragma once

#include <cstring>
#include <type_traits>

#include "backend/cpu/packed_weight.h"
#include "backend/cpu/simd.h"

#if !defined(LS_PACKED_TARGET) || !defined(LS_PACKED_VNNI) || !defined(LS_PACKED_NAME)
#error "define LS_PACKED_TARGET, LS_PACKED_VNNI and LS_PACKED_NAME before including this file"
#endif

namespace llamaserve::cpu {
namespace {

// The tile bytes `ahead` (kPrefetchAhead unless the kernel streams otherwise) past the block
// being multiplied, a block's worth of lines, into L2 (packed_weight.h).
// Prefetches do not fault, so running past the end of the packed matrix is harmless.
template <typename B>
LS_PACKED_TARGET inline void prefetch_ahead(const B& blk, size_t ahead = kPrefetchAhead) {
  const char* p = reinterpret_cast<const char*>(&blk) + ahead;
  for (size_t o = 0; o < sizeof(B); o += 64) _mm_prefetch(p + o, _MM_HINT_T1);
}

LS_PACKED_TARGET inline __m256i broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm256_set1_epi32(v);
}

// Products of unsigned bytes u and signed bytes s summed over each four-byte group into the
// running sums: int16 sums of maddubs pairs (AVX2; the Q4 tiles' eight steps of nibbles <= 15
// against |s| <= 127 stay below 2^15) or int32 sums (VNNI).
LS_PACKED_TARGET inline __m256i add_products(__m256i acc, __m256i u, __m256i s) {
#if LS_PACKED_VNNI
  return _mm256_dpbusd_epi32(acc, u, s);
#else
  return _mm256_add_epi16(acc, _mm256_maddubs_epi16(u, s));
#endif
}

// add_products' sums as int32 per four-byte group (per row lane pair of int16 on AVX2).
LS_PACKED_TARGET inline __m256i widen_sums(__m256i acc) {
#if LS_PACKED_VNNI
  return acc;
#else
  return _mm256_madd_epi16(acc, _mm256_set1_epi16(1));
#endif
}

// The same into int32 sums at every step, for bytes whose pair sums reach 2^15 (Q8_0:
// |q| <= 128 against |s| <= 127).
LS_PACKED_TARGET inline __m256i add_products_i32(__m256i acc, __m256i u, __m256i s) {
#if LS_PACKED_VNNI
  return _mm256_dpbusd_epi32(acc, u, s);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

template <int NT, typename Block>
LS_PACKED_TARGET inline void packed_tokens(const Block* w, int64_t n_blocks,
                                           const ActBlockQ8_32x2* const* x, __m256* out) {
  const __m256i mask = _mm256_set1_epi8(0x0f);
  __m256 acc[NT];
  __m256 off[NT];
  for (int t = 0; t < NT; ++t) {
    acc[t] = _mm256_setzero_ps();
    off[t] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < n_blocks; ++b) {
    const Block& blk = w[b];
    prefetch_ahead(blk);
    const int64_t pair = b >> 1;
    const int half = static_cast<int>(b & 1) * 16;
    __m256i sums[NT];
    for (int t = 0; t < NT; ++t) sums[t] = _mm256_setzero_si256();
    for (int g = 0; g < 4; ++g) {
      const __m256i q = load32(blk.qs + 32 * g);
      const __m256i low = _mm256_and_si256(q, mask);
      const __m256i high = _mm256_and_si256(_mm256_srli_epi16(q, 4), mask);
      for (int t = 0; t < NT; ++t) {
        const ActBlockQ8_32x2& p = x[t][pair];
        sums[t] = add_products(sums[t], low, broadcast4(p.low + half + 4 * g));
        sums[t] = add_products(sums[t], high, broadcast4(p.high + half + 4 * g));
      }
    }
    const __m256 d = load_f16x8(&blk.d[0].bits);
    __m256 o = d;
    if constexpr (requires { blk.m; }) o = load_f16x8(&blk.m[0].bits);
    for (int t = 0; t < NT; ++t) {
      const ActBlockQ8_32x2& p = x[t][pair];
      const __m256i s = widen_sums(sums[t]);
      const __m256 dx = _mm256_set1_ps(p.scale_sum[half / 8]);
      acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(s), acc[t]);
      off[t] = _mm256_fmadd_ps(o, _mm256_set1_ps(p.scale_sum[half / 8 + 1]), off[t]);
    }
  }
  for (int t = 0; t < NT; ++t) {
    if constexpr (requires { w->m; }) {
      out[t] = _mm256_add_ps(acc[t], off[t]);
    } else {
      out[t] = _mm256_fmadd_ps(_mm256_set1_ps(-8.0f), off[t], acc[t]);
    }
  }
}

// Q8_0: signed weights, so each 32-byte group meets the activation bytes through |q| and the
// activation with q's sign. acc += (d * dx) * Σ.
template <int NT>
LS_PACKED_TARGET inline void packed_tokens(const PackedQ8_0Block* w, int64_t n_blocks,
                                           const ActBlockQ8_32* const* x, __m256* out) {
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const PackedQ8_0Block& blk = w[b];
    prefetch_ahead(blk);
    __m256i sums[NT];
    for (int t = 0; t < NT; ++t) sums[t] = _mm256_setzero_si256();
    for (int g = 0; g < 8; ++g) {
      const __m256i q = load32(blk.qs + 32 * g);
      const __m256i magnitude = _mm256_abs_epi8(q);
      for (int t = 0; t < NT; ++t) {
        sums[t] = add_products_i32(sums[t], magnitude,
                                   _mm256_sign_epi8(broadcast4(x[t][b].qs + 4 * g), q));
      }
    }
    const __m256 d = load_f16x8(&blk.d[0].bits);
    for (int t = 0; t < NT; ++t) {
      acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(x[t][b].d)),
                               _mm256_cvtepi32_ps(sums[t]), acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t] = acc[t];
}

// Eight rows' unsigned bytes as sixteen int16, row r's value in lanes 2r and 2r + 1.
LS_PACKED_TARGET inline __m256i row_pairs(const uint8_t* v) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(v));
  return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(bytes, bytes));
}

// Σ_j min_j(row) * subs[j] per row lane: subs holds the activation's eight sub-block sums as
// int16 (|Σ| <= 32 * 127), the mins pairs of sub-blocks (2p, 2p + 1) for one 16-bit multiply-add.
LS_PACKED_TARGET inline __m256i k_min_sums(const uint8_t (&packed_mins)[4][2 * kPackedRows],
                                           __m128i subs) {
  __m256i sum = _mm256_setzero_si256();
  const __m256i pairs[4] = {_mm256_broadcastd_epi32(subs),
                            _mm256_broadcastd_epi32(_mm_srli_si128(subs, 4)),
                            _mm256_broadcastd_epi32(_mm_srli_si128(subs, 8)),
                            _mm256_broadcastd_epi32(_mm_srli_si128(subs, 12))};
  for (int p = 0; p < 4; ++p) {
    const __m256i mins =
        _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(packed_mins[p])));
    sum = _mm256_add_epi32(sum, _mm256_madd_epi16(mins, pairs[p]));
  }
  return sum;
}

// Q4_K and Q5_K, per super-block: each chunk c of eight groups gives two sub-blocks (2c in the
// low nibbles, 2c + 1 in the high ones; Q5_K adds each element's fifth bit as bit 4). Four
// maddubs steps at a time (|Σ| <= 4 * 2 * 31 * 127 < 2^15) meet the eight rows' scales of their
// sub-block in one 16-bit multiply-add (scale r in both int16 lanes of row r), and the mins
// meet the activation's sub-block sums two sub-blocks at a time. Both instruction sets run the
// same maddubs here: the sums are multiplied by the scales in int16 pairs, which vpdpbusd's
// int32 sums would not allow without a 32-bit multiply.
// acc += (d * dx) * Σ_j scale_j Σ q x, mins += (dmin * dx) * Σ_j min_j Σ_j x; y = acc - mins.
template <int NT, typename Block>
requires std::is_same_v<Block, PackedQ4_KBlock> || std::is_same_v<Block, PackedQ5_KBlock>
    LS_PACKED_TARGET inline void packed_tokens(const Block* w, int64_t n_blocks,
                                               const ActBlockQ8_256* const* x, __m256* out) {
  constexpr bool kFifthBit = std::is_same_v<Block, PackedQ5_KBlock>;
  const __m256i mask = _mm256_set1_epi8(0x0f);
  const __m256i bit4 = _mm256_set1_epi8(0x10);
  __m256 acc[NT];
  __m256 mins[NT];
  for (int t = 0; t < NT; ++t) {
    acc[t] = _mm256_setzero_ps();
    mins[t] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < n_blocks; ++b) {
    const Block& blk = w[b];
    prefetch_ahead(blk);
    __m256i sums[NT];
    for (int t = 0; t < NT; ++t) sums[t] = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i low_scales = row_pairs(blk.scales[2 * c]);
      const __m256i high_scales = row_pairs(blk.scales[2 * c + 1]);
      for (int h = 0; h < 2; ++h) {
        __m256i fifth = _mm256_setzero_si256();
        if constexpr (kFifthBit) fifth = load32(blk.qh[2 * c + h]);
        __m256i low_sums[NT], high_sums[NT];
        for (int t = 0; t < NT; ++t) low_sums[t] = high_sums[t] = _mm256_setzero_si256();
        for (int i = 0; i < 4; ++i) {
          const int g = 8 * c + 4 * h + i;
          const __m256i q = load32(blk.qs + 32 * g);
          __m256i low = _mm256_and_si256(q, mask);
          __m256i high = _mm256_and_si256(_mm256_srli_epi16(q, 4), mask);
          if constexpr (kFifthBit) {
            // Bits 2i and 2i + 1 of each byte to bit 4.
            const __m256i bits = _mm256_srl_epi16(fifth, _mm_cvtsi32_si128(2 * i));
            low = _mm256_or_si256(low, _mm256_and_si256(_mm256_slli_epi16(bits, 4), bit4));
            high = _mm256_or_si256(high, _mm256_and_si256(_mm256_slli_epi16(bits, 3), bit4));
          }
          for (int t = 0; t < NT; ++t) {
            const int8_t* xq = x[t][b].qs + 64 * c + 4 * (4 * h + i);
            low_sums[t] = _mm256_add_epi16(low_sums[t], _mm256_maddubs_epi16(low, broadcast4(xq)));
            high_sums[t] =
                _mm256_add_epi16(high_sums[t], _mm256_maddubs_epi16(high, broadcast4(xq + 32)));
          }
        }
        for (int t = 0; t < NT; ++t) {
          sums[t] = _mm256_add_epi32(sums[t], _mm256_madd_epi16(low_sums[t], low_scales));
          sums[t] = _mm256_add_epi32(sums[t], _mm256_madd_epi16(high_sums[t], high_scales));
        }
      }
    }
    const __m256 d = load_f16x8(&blk.d[0].bits);
    const __m256 dmin = load_f16x8(&blk.dmin[0].bits);
    for (int t = 0; t < NT; ++t) {
      const ActBlockQ8_256& xb = x[t][b];
      // Sub-block sums of the activation: groups 2j and 2j + 1.
      const __m256i groups = load32(xb.group_sums);
      const __m128i subs =
          _mm_hadd_epi16(_mm256_castsi256_si128(groups), _mm256_extracti128_si256(groups, 1));
      const __m256i min_sum = k_min_sums(blk.mins, subs);
      const __m256 dx = _mm256_set1_ps(xb.d);
      acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(sums[t]), acc[t]);
      mins[t] = _mm256_fmadd_ps(_mm256_mul_ps(dmin, dx), _mm256_cvtepi32_ps(min_sum), mins[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t] = _mm256_sub_ps(acc[t], mins[t]);
}

// Eight rows' signed bytes as sixteen int16, row r's value in lanes 2r and 2r + 1.
LS_PACKED_TARGET inline __m256i signed_row_pairs(const int8_t* v) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(v));
  return _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(bytes, bytes));
}

// Q6_K: Σ_j scale_j(row) * group_sums[j] per row lane, two 16-element groups per multiply-add.
LS_PACKED_TARGET inline __m256i q6_k_offsets(const PackedQ6_KBlock& blk, const ActBlockQ8_256& x) {
  __m256i sum = _mm256_setzero_si256();
  for (int p = 0; p < 8; ++p) {
    const __m128i a = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk.scales[2 * p]));
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk.scales[2 * p + 1]));
    const __m256i scales = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(a, b));
    int32_t pair;
    std::memcpy(&pair, &x.group_sums[2 * p], sizeof pair);
    sum = _mm256_add_epi32(sum, _mm256_madd_epi16(scales, _mm256_set1_epi32(pair)));
  }
  return sum;
}

// Q6_K, per super-block: the 6-bit values of two groups come from their nibble bytes and one
// shared load of high bits; two maddubs steps (|Σ| <= 2 * 2 * 63 * 127 < 2^15) then meet the
// rows' scale of their 16 elements in one 16-bit multiply-add. The -32 offset is taken off in
// int32 through the activation's group sums: y = (d * dx) * (Σ - 32 * Σ_j scale_j gs_j).
template <int NT>
LS_PACKED_TARGET inline void packed_tokens(const PackedQ6_KBlock* w, int64_t n_blocks,
                                           const ActBlockQ8_256* const* x, __m256* out) {
  const __m256i mask = _mm256_set1_epi8(0x0f);
  const __m256i bits45 = _mm256_set1_epi8(0x30);
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const PackedQ6_KBlock& blk = w[b];
    prefetch_ahead(blk);
    __m256i sums[NT];
    for (int t = 0; t < NT; ++t) sums[t] = _mm256_setzero_si256();
    for (int g = 0; g < 32; g += 2) {
      // Groups g and g + 1: elements 64k + 4i + c (low nibbles) and 64k + 32 + 4i + c (high).
      const int k = g / 8, i = g % 8;
      const __m256i high_bits = load32(blk.qh[g / 2]);
      const __m256i na = load32(blk.nibbles + 32 * g);
      const __m256i nb = load32(blk.nibbles + 32 * (g + 1));
      const __m256i low_a = _mm256_or_si256(
          _mm256_and_si256(na, mask), _mm256_and_si256(_mm256_slli_epi16(high_bits, 4), bits45));
      const __m256i high_a =
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(na, 4), mask),
                          _mm256_and_si256(_mm256_slli_epi16(high_bits, 2), bits45));
      const __m256i low_b =
          _mm256_or_si256(_mm256_and_si256(nb, mask), _mm256_and_si256(high_bits, bits45));
      const __m256i high_b =
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(nb, 4), mask),
                          _mm256_and_si256(_mm256_srli_epi16(high_bits, 2), bits45));
      // Elements 64k + 4i.. use scale 4k + i / 4, those 32 further 4k + 2 + i / 4.
      const __m256i low_scales = signed_row_pairs(blk.scales[4 * k + i / 4]);
      const __m256i high_scales = signed_row_pairs(blk.scales[4 * k + 2 + i / 4]);
      for (int t = 0; t < NT; ++t) {
        const int8_t* xq = x[t][b].qs + 64 * k + 4 * i;
        const __m256i low = _mm256_add_epi16(_mm256_maddubs_epi16(low_a, broadcast4(xq)),
                                             _mm256_maddubs_epi16(low_b, broadcast4(xq + 4)));
        const __m256i high = _mm256_add_epi16(_mm256_maddubs_epi16(high_a, broadcast4(xq + 32)),
                                              _mm256_maddubs_epi16(high_b, broadcast4(xq + 36)));
        sums[t] = _mm256_add_epi32(sums[t], _mm256_madd_epi16(low, low_scales));
        sums[t] = _mm256_add_epi32(sums[t], _mm256_madd_epi16(high, high_scales));
      }
    }
    const __m256 d = load_f16x8(&blk.d[0].bits);
    for (int t = 0; t < NT; ++t) {
      const __m256i offsets = _mm256_slli_epi32(q6_k_offsets(blk, x[t][b]), 5);
      acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(x[t][b].d)),
                               _mm256_cvtepi32_ps(_mm256_sub_epi32(sums[t], offsets)), acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t] = acc[t];
}

LS_PACKED_TARGET inline void store_rows(__m256 v, float* y, int64_t n_rows) {
  if (n_rows == kPackedRows) {
    _mm256_storeu_ps(y, v);
    return;
  }
  float all[kPackedRows];
  _mm256_storeu_ps(all, v);
  std::memcpy(y, all, static_cast<size_t>(n_rows) * sizeof(float));
}

template <typename Block>
LS_PACKED_TARGET void packed_tile(const uint8_t* tile, int64_t n_blocks, const uint8_t* act,
                                  size_t act_stride, int64_t n_tokens, float* y, int64_t y_stride,
                                  int64_t n_rows) {
  const auto* w = reinterpret_cast<const Block*>(tile);
  using Act = typename Block::Act;
  auto row = [&](int64_t t) { return reinterpret_cast<const Act*>(act + t * act_stride); };
  int64_t t = 0;
  for (; t + 4 <= n_tokens; t += 4) {
    const Act* x[4] = {row(t), row(t + 1), row(t + 2), row(t + 3)};
    __m256 out[4];
    packed_tokens<4>(w, n_blocks, x, out);
    for (int i = 0; i < 4; ++i) store_rows(out[i], y + (t + i) * y_stride, n_rows);
  }
  for (; t < n_tokens; ++t) {
    const Act* x = row(t);
    __m256 out;
    packed_tokens<1>(w, n_blocks, &x, &out);
    store_rows(out, y + t * y_stride, n_rows);
  }
}

}  // namespace

// The entry points packed_weight.h declares, one per type.
#define LS_PACKED_ENTRY(type, Block)                                                         \
  void LS_PACKED_NAME(type)(const uint8_t* tile, int64_t n_blocks, const uint8_t* act,       \
                            size_t act_stride, int64_t n_tokens, float* y, int64_t y_stride, \
                            int64_t n_rows) {                                                \
    packed_tile<Block>(tile, n_blocks, act, act_stride, n_tokens, y, y_stride, n_rows);      \
  }
LS_PACKED_ENTRY(q4_0, PackedQ4_0Block)
LS_PACKED_ENTRY(q4_1, PackedQ4_1Block)
LS_PACKED_ENTRY(q8_0, PackedQ8_0Block)
LS_PACKED_ENTRY(q4_k, PackedQ4_KBlock)
LS_PACKED_ENTRY(q5_k, PackedQ5_KBlock)
LS_PACKED_ENTRY(q6_k, PackedQ6_KBlock)
#undef LS_PACKED_ENTRY

}  // namespace llamaserve::cpu
