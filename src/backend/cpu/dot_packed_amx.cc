// The AMX kernels of two packed tiles (Q8_0, Q4_0, Q4_1) over sixteen tokens at a time: the
// integer products of a block run on the tile unit, one TDPBSSD / TDPBSUD per block (16 tokens x
// the pair's 16 rows x 32 elements), and the float work per block is packed_tile_pair's, in its
// order, with the int32 sums read back from the accumulator tile. The int32 sums are exact on
// both paths, so each output has the bits packed_tile_pair_*_avx512 gives it.
//
// Tiles: the activations of a block (16 tokens x 32 bytes: one block's codes of each token's
// ActFormat::kQ8_32Planar row, through the row stride), the pair's weights of a block (8 rows of
// 64 bytes: row g holds elements 4g..4g + 3 of tile a's eight rows, then of tile b's, which is
// how a packed tile holds a block's 32-byte groups, two tiles side by side; a Q4 block's nibbles
// are split first, low nibbles (elements 0..15) in rows 0..3, high ones in rows 4..7) and the
// sums (16 tokens x 16 int32). The weights are rearranged once per call, before the first
// product, into a buffer of the thread's. Blocks go through a pipeline: block b's product into
// sum tile b % 4 (activation and weight tiles b % 2), block b - 2's sums stored, block b - 3's
// scaled, so that neither the tile unit's latency nor the stores are waited out block by block.
//
// Only where cpu_has_amx_int8(): the process has asked the kernel for the tile state then.
#include "backend/cpu/simd_avx512.h"

#include <cstdlib>
#include <type_traits>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/packed_weight.h"

#define LS_AMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,amx-tile,amx-int8")))

namespace llamaserve::cpu {
namespace {

namespace v = avx512;

constexpr int kTokens = kAmxTokens;
static_assert(kTokens == 16, "a tile holds 16 rows");
constexpr int kRows = 2 * kPackedRows;  // the pair's
constexpr int kActBytes = 32;           // a block's codes of one token
constexpr int kWeightRows = 8;          // a block's 32 elements, four a row
constexpr int kWeightRowBytes = 4 * kRows;
constexpr size_t kWeightTileBytes = kWeightRows * kWeightRowBytes;

// The tile bytes kPrefetchAhead past the block being multiplied into L2, as the other kernels do.
template <typename B>
LS_AMX inline void prefetch_ahead(const B& blk) {
  const char* p = reinterpret_cast<const char*>(&blk) + kPrefetchAhead;
  for (size_t o = 0; o < sizeof(B); o += 64) _mm_prefetch(p + o, _MM_HINT_T1);
}

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// tmm0..3 sums, tmm4 and 5 activations, tmm6 and 7 weights.
constexpr TileConfig make_config() {
  TileConfig c;
  for (int t : {0, 1, 2, 3}) {
    c.rows[t] = kTokens;
    c.colsb[t] = 4 * kRows;
  }
  for (int t : {4, 5}) {
    c.rows[t] = kTokens;
    c.colsb[t] = kActBytes;
  }
  for (int t : {6, 7}) {
    c.rows[t] = kWeightRows;
    c.colsb[t] = kWeightRowBytes;
  }
  return c;
}
constexpr TileConfig kConfig = make_config();

// A pair's block as a weight tile (above).
LS_AMX inline void weight_tile(const PackedQ8_0Block& a, const PackedQ8_0Block& b, uint8_t* out) {
  for (int g = 0; g < kWeightRows; ++g) {
    _mm512_store_si512(out + g * kWeightRowBytes, v::load2x32(a.qs + 32 * g, b.qs + 32 * g));
  }
}
template <typename Block>
LS_AMX inline void weight_tile(const Block& a, const Block& b, uint8_t* out) {
  const __m512i mask = _mm512_set1_epi8(0x0f);
  for (int g = 0; g < 4; ++g) {
    const __m512i q = v::load2x32(a.qs + 32 * g, b.qs + 32 * g);
    _mm512_store_si512(out + g * kWeightRowBytes, _mm512_and_si512(q, mask));
    _mm512_store_si512(out + (4 + g) * kWeightRowBytes,
                       _mm512_and_si512(_mm512_srli_epi16(q, 4), mask));
  }
}

// The thread's weight tiles of the pair being multiplied, block b's at b * kWeightTileBytes.
struct WeightTiles {
  uint8_t* data = nullptr;
  size_t blocks = 0;
  ~WeightTiles() { std::free(data); }
  uint8_t* reserve(int64_t n_blocks) {
    if (blocks < static_cast<size_t>(n_blocks)) {
      std::free(data);
      blocks = static_cast<size_t>(n_blocks);
      data = static_cast<uint8_t*>(std::aligned_alloc(64, blocks * kWeightTileBytes));
    }
    return data;
  }
};

// Block b's scaled sums for 16 tokens, its sums in `sums` (token t's in row t) and its scales at
// `dx` (token t's dx[t * stride]): acc += (d * dx) * Σ, as packed_tile_pair does.
template <typename Block>
LS_AMX inline void scale_block(const Block* wa, const Block* wb, int64_t b, const float* dx,
                               size_t stride, const int32_t (&sums)[kTokens][kRows],
                               __m512 (&acc)[kTokens]) {
  const __m512 d = v::load_f16x8_pair(wa[b].d, wb[b].d);
  for (int t = 0; t < kTokens; ++t, dx += stride) {
    acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(*dx)),
                             _mm512_cvtepi32_ps(_mm512_load_si512(sums[t])), acc[t]);
  }
}

// The Q4 blocks' offset terms for 16 tokens, block after block: off += o * sx with o = m (Q4_1)
// or d (Q4_0) and sx the activation block's sum (token t's at sx[t * stride]), as
// packed_tile_pair does (its order for each token: the blocks in turn).
template <typename Block>
LS_AMX inline void offsets(const Block* wa, const Block* wb, int64_t n_blocks, const float* sx,
                           size_t stride, __m512 (&off)[kTokens]) {
  for (int t = 0; t < kTokens; ++t) off[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    __m512 o;
    if constexpr (requires { wa->m; }) {
      o = v::load_f16x8_pair(wa[b].m, wb[b].m);
    } else {
      o = v::load_f16x8_pair(wa[b].d, wb[b].d);
    }
    const float* x = sx + b;
    for (int t = 0; t < kTokens; ++t, x += stride) {
      off[t] = _mm512_fmadd_ps(o, _mm512_set1_ps(*x), off[t]);
    }
  }
}

// Block b's product into sum tile C with activation tile A and weight tile W (literal tile
// numbers: they are part of the instructions).
#define LS_AMX_PRODUCT(C, A, W, b)                                       \
  do {                                                                   \
    _tile_zero(C);                                                       \
    _tile_loadd(A, planar_codes(act, b), static_cast<long>(act_stride)); \
    _tile_loadd(W, weights + (b)*kWeightTileBytes, kWeightRowBytes);     \
    if constexpr (kQ8) {                                                 \
      _tile_dpbssd(C, A, W);                                             \
    } else {                                                             \
      _tile_dpbsud(C, A, W);                                             \
    }                                                                    \
  } while (0)

// Tokens t0..t0 + 15 of one pair of tiles (their rows at act, act_stride apart); y has the pair's
// 16 rows of each token. `weights`: the pair's weight tiles.
template <typename Block>
LS_AMX void pair_tokens16(const Block* wa, const Block* wb, int64_t n_blocks,
                          const uint8_t* weights, const uint8_t* act, size_t act_stride, float* y,
                          int64_t y_stride) {
  constexpr bool kQ8 = std::is_same_v<Block, PackedQ8_0Block>;
  alignas(64) int32_t sums[2][kTokens][kRows];  // blocks of each parity
  __m512 acc[kTokens];
  for (int t = 0; t < kTokens; ++t) acc[t] = _mm512_setzero_ps();
  const size_t stride = act_stride / sizeof(float);  // a multiple of 64 bytes
  const float* dx = planar_scales(act, n_blocks);
  for (int64_t b = 0; b < n_blocks + 3; ++b) {
    if (b < n_blocks) {
      switch (b % 4) {
        case 0: LS_AMX_PRODUCT(0, 4, 6, b); break;
        case 1: LS_AMX_PRODUCT(1, 5, 7, b); break;
        case 2: LS_AMX_PRODUCT(2, 4, 6, b); break;
        default: LS_AMX_PRODUCT(3, 5, 7, b); break;
      }
    }
    if (const int64_t stored = b - 2; stored >= 0 && stored < n_blocks) {
      int32_t* to = &sums[stored % 2][0][0];
      constexpr long kStride = sizeof sums[0][0];
      switch (stored % 4) {
        case 0: _tile_stored(0, to, kStride); break;
        case 1: _tile_stored(1, to, kStride); break;
        case 2: _tile_stored(2, to, kStride); break;
        default: _tile_stored(3, to, kStride); break;
      }
    }
    if (const int64_t scaled = b - 3; scaled >= 0) {
      scale_block(wa, wb, scaled, dx + scaled, stride, sums[scaled % 2], acc);
    }
  }
  if constexpr (kQ8) {
    for (int t = 0; t < kTokens; ++t) _mm512_storeu_ps(y + t * y_stride, acc[t]);
  } else {
    __m512 off[kTokens];
    offsets(wa, wb, n_blocks, planar_sums(act, n_blocks), stride, off);
    for (int t = 0; t < kTokens; ++t) {
      __m512 out;
      if constexpr (requires { wa->m; }) {
        out = _mm512_add_ps(acc[t], off[t]);
      } else {
        out = _mm512_fmadd_ps(_mm512_set1_ps(-8.0f), off[t], acc[t]);
      }
      _mm512_storeu_ps(y + t * y_stride, out);
    }
  }
}

#undef LS_AMX_PRODUCT

template <typename Block>
LS_AMX void tile_pair_amx(const uint8_t* tile_a, const uint8_t* tile_b, int64_t n_blocks,
                          const uint8_t* act, size_t act_stride, int64_t n_tokens, float* y,
                          int64_t y_stride) {
  const auto* wa = reinterpret_cast<const Block*>(tile_a);
  const auto* wb = reinterpret_cast<const Block*>(tile_b);
  thread_local WeightTiles tiles;
  uint8_t* weights = tiles.reserve(n_blocks);
  for (int64_t b = 0; b < n_blocks; ++b) {
    prefetch_ahead(wa[b]);
    prefetch_ahead(wb[b]);
    weight_tile(wa[b], wb[b], weights + b * kWeightTileBytes);
  }
  _tile_loadconfig(&kConfig);
  for (int64_t t = 0; t < n_tokens; t += kTokens) {
    pair_tokens16(wa, wb, n_blocks, weights, act + static_cast<size_t>(t) * act_stride, act_stride,
                  y + t * y_stride, y_stride);
  }
  _tile_release();
}

}  // namespace

void packed_tile_pair_q8_0_amx(const uint8_t* tile_a, const uint8_t* tile_b, int64_t n_blocks,
                               const uint8_t* act, size_t act_stride, int64_t n_tokens, float* y,
                               int64_t y_stride) {
  tile_pair_amx<PackedQ8_0Block>(tile_a, tile_b, n_blocks, act, act_stride, n_tokens, y, y_stride);
}

void packed_tile_pair_q4_0_amx(const uint8_t* tile_a, const uint8_t* tile_b, int64_t n_blocks,
                               const uint8_t* act, size_t act_stride, int64_t n_tokens, float* y,
                               int64_t y_stride) {
  tile_pair_amx<PackedQ4_0Block>(tile_a, tile_b, n_blocks, act, act_stride, n_tokens, y, y_stride);
}

void packed_tile_pair_q4_1_amx(const uint8_t* tile_a, const uint8_t* tile_b, int64_t n_blocks,
                               const uint8_t* act, size_t act_stride, int64_t n_tokens, float* y,
                               int64_t y_stride) {
  tile_pair_amx<PackedQ4_1Block>(tile_a, tile_b, n_blocks, act, act_stride, n_tokens, y, y_stride);
}

}  // namespace llamaserve::cpu
