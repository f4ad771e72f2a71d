// The AVX-512 VNNI kernels of packed tiles: dot_packed_body.h with vpdpbusd, and for Q4_0 and
// Q4_1 and Q8_0 a kernel of two tiles at once in 16-lane registers (below: the nibbles' unpacking,
// the broadcast activation bytes and the float work serve sixteen rows instead of eight). The entry
// points are plain functions (no target attribute, so that their declarations in
// packed_weight.h are ordinary ones); each passes straight on to its AVX-512 body.
// First: it includes immintrin.h in its own way (see there).
#include "backend/cpu/simd_avx512.h"

#define LS_PACKED_TARGET LS_AVX512
#define LS_PACKED_VNNI 1
#define LS_PACKED_NAME(type) packed_tile_##type##_avx512
#include "backend/cpu/dot_packed_body.h"

namespace llamaserve::cpu {
namespace {

namespace v = avx512;

// How far ahead the kernels of two tiles prefetch: a whole pair. They read two streams, tile a
// and the tile after it, and a unit's next pair follows them (matmul.cc), so each stream's
// block b of the next pair lies two tiles past its block b of this one. A fixed distance would
// land inside this pair's own tile b wherever a tile is shorter than it (SmolLM2's 576 columns:
// 2.9 KiB of Q4_1): lines already on their way.
template <typename Block>
constexpr size_t pair_prefetch_ahead(int64_t n_blocks) {
  return 2 * static_cast<size_t>(n_blocks) * sizeof(Block);
}

// packed_tokens of Q4_0 / Q4_1 for two tiles at once, tile a's rows in lanes 0..7 and tile b's
// in 8..15: each lane does what the one-tile kernel does for its row, in the same order.
template <int NT, typename Block>
LS_AVX512 void packed_tokens_pair(const Block* wa, const Block* wb, int64_t n_blocks,
                                  const ActBlockQ8_32x2* const* x, __m512* out) {
  const size_t ahead = pair_prefetch_ahead<Block>(n_blocks);
  const __m512i mask = _mm512_set1_epi8(0x0f);
  __m512 acc[NT];
  __m512 off[NT];
  for (int t = 0; t < NT; ++t) {
    acc[t] = _mm512_setzero_ps();
    off[t] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < n_blocks; ++b) {
    prefetch_ahead(wa[b], ahead);
    prefetch_ahead(wb[b], ahead);
    const int64_t pair = b >> 1;
    const int half = static_cast<int>(b & 1) * 16;
    __m512i sums[NT];
    for (int t = 0; t < NT; ++t) sums[t] = _mm512_setzero_si512();
    for (int g = 0; g < 4; ++g) {
      const __m512i q = v::load2x32(wa[b].qs + 32 * g, wb[b].qs + 32 * g);
      const __m512i low = _mm512_and_si512(q, mask);
      const __m512i high = _mm512_and_si512(_mm512_srli_epi16(q, 4), mask);
      for (int t = 0; t < NT; ++t) {
        const ActBlockQ8_32x2& p = x[t][pair];
        int32_t lo4, hi4;
        std::memcpy(&lo4, p.low + half + 4 * g, sizeof lo4);
        std::memcpy(&hi4, p.high + half + 4 * g, sizeof hi4);
        sums[t] = _mm512_dpbusd_epi32(sums[t], low, _mm512_set1_epi32(lo4));
        sums[t] = _mm512_dpbusd_epi32(sums[t], high, _mm512_set1_epi32(hi4));
      }
    }
    const __m512 d = v::load_f16x8_pair(wa[b].d, wb[b].d);
    __m512 o = d;
    if constexpr (requires { wa->m; }) o = v::load_f16x8_pair(wa[b].m, wb[b].m);
    for (int t = 0; t < NT; ++t) {
      const ActBlockQ8_32x2& p = x[t][pair];
      const __m512 dx = _mm512_set1_ps(p.scale_sum[half / 8]);
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(sums[t]), acc[t]);
      off[t] = _mm512_fmadd_ps(o, _mm512_set1_ps(p.scale_sum[half / 8 + 1]), off[t]);
    }
  }
  for (int t = 0; t < NT; ++t) {
    if constexpr (requires { wa->m; }) {
      out[t] = _mm512_add_ps(acc[t], off[t]);
    } else {
      out[t] = _mm512_fmadd_ps(_mm512_set1_ps(-8.0f), off[t], acc[t]);
    }
  }
}

// The Q8_0 kernel for two tiles at once. AVX-512 has no byte sign instruction: the activation
// bytes are negated where the weight is negative; where it is zero its magnitude is too, so the
// products, and the int32 sums, are the one-tile kernel's.
template <int NT>
LS_AVX512 void packed_tokens_pair(const PackedQ8_0Block* wa, const PackedQ8_0Block* wb,
                                  int64_t n_blocks, const ActBlockQ8_32* const* x, __m512* out) {
  const size_t ahead = pair_prefetch_ahead<PackedQ8_0Block>(n_blocks);
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    prefetch_ahead(wa[b], ahead);
    prefetch_ahead(wb[b], ahead);
    __m512i sums[NT];
    for (int t = 0; t < NT; ++t) sums[t] = _mm512_setzero_si512();
    for (int g = 0; g < 8; ++g) {
      const __m512i q = v::load2x32(wa[b].qs + 32 * g, wb[b].qs + 32 * g);
      const __m512i magnitude = _mm512_abs_epi8(q);
      const __mmask64 negative = _mm512_movepi8_mask(q);
      for (int t = 0; t < NT; ++t) {
        int32_t four;
        std::memcpy(&four, x[t][b].qs + 4 * g, sizeof four);
        const __m512i bytes = _mm512_set1_epi32(four);
        const __m512i signed_bytes =
            _mm512_mask_sub_epi8(bytes, negative, _mm512_setzero_si512(), bytes);
        sums[t] = _mm512_dpbusd_epi32(sums[t], magnitude, signed_bytes);
      }
    }
    const __m512 d = v::load_f16x8_pair(wa[b].d, wb[b].d);
    for (int t = 0; t < NT; ++t) {
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(x[t][b].d)),
                               _mm512_cvtepi32_ps(sums[t]), acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t] = acc[t];
}

template <typename Block>
LS_AVX512 void packed_tile_pair(const uint8_t* tile_a, const uint8_t* tile_b, int64_t n_blocks,
                                const uint8_t* act, size_t act_stride, int64_t n_tokens, float* y,
                                int64_t y_stride) {
  const auto* wa = reinterpret_cast<const Block*>(tile_a);
  const auto* wb = reinterpret_cast<const Block*>(tile_b);
  using Act = typename Block::Act;
  auto row = [&](int64_t t) { return reinterpret_cast<const Act*>(act + t * act_stride); };
  int64_t t = 0;
  for (; t + 4 <= n_tokens; t += 4) {
    const Act* x[4] = {row(t), row(t + 1), row(t + 2), row(t + 3)};
    __m512 out[4];
    packed_tokens_pair<4>(wa, wb, n_blocks, x, out);
    for (int i = 0; i < 4; ++i) _mm512_storeu_ps(y + (t + i) * y_stride, out[i]);
  }
  for (; t < n_tokens; ++t) {
    const Act* x = row(t);
    __m512 out;
    packed_tokens_pair<1>(wa, wb, n_blocks, &x, &out);
    _mm512_storeu_ps(y + t * y_stride, out);
  }
}

}  // namespace

void packed_tile_pair_q4_0_avx512(const uint8_t* tile_a, const uint8_t* tile_b, int64_t n_blocks,
                                  const uint8_t* act, size_t act_stride, int64_t n_tokens, float* y,
                                  int64_t y_stride) {
  packed_tile_pair<PackedQ4_0Block>(tile_a, tile_b, n_blocks, act, act_stride, n_tokens, y,
                                    y_stride);
}

void packed_tile_pair_q8_0_avx512(const uint8_t* tile_a, const uint8_t* tile_b, int64_t n_blocks,
                                  const uint8_t* act, size_t act_stride, int64_t n_tokens, float* y,
                                  int64_t y_stride) {
  packed_tile_pair<PackedQ8_0Block>(tile_a, tile_b, n_blocks, act, act_stride, n_tokens, y,
                                    y_stride);
}

void packed_tile_pair_q4_1_avx512(const uint8_t* tile_a, const uint8_t* tile_b, int64_t n_blocks,
                                  const uint8_t* act, size_t act_stride, int64_t n_tokens, float* y,
                                  int64_t y_stride) {
  packed_tile_pair<PackedQ4_1Block>(tile_a, tile_b, n_blocks, act, act_stride, n_tokens, y,
                                    y_stride);
}

}  // namespace llamaserve::cpu
