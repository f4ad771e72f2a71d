// The AMX kernels of two packed tiles over sixteen tokens at a time. Q8_0, Q4_0 and Q4_1 here (the
// K-quants' sections below say how theirs differ): the
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

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/packed_weight.h"

#define LS_AMX \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,amx-tile,amx-int8")))

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

// tmm0..3 sums (16 tokens x 16 int32), tmm4 and 5 activations (16 tokens x act_bytes), tmm6 and
// 7 weights (weight_rows x 64 bytes).
constexpr TileConfig make_config(int act_bytes, int weight_rows) {
  TileConfig c;
  for (int t : {0, 1, 2, 3}) {
    c.rows[t] = kTokens;
    c.colsb[t] = 4 * kRows;
  }
  for (int t : {4, 5}) {
    c.rows[t] = kTokens;
    c.colsb[t] = static_cast<uint16_t>(act_bytes);
  }
  for (int t : {6, 7}) {
    c.rows[t] = static_cast<uint8_t>(weight_rows);
    c.colsb[t] = kWeightRowBytes;
  }
  return c;
}
constexpr TileConfig kConfig = make_config(kActBytes, kWeightRows);

// The configuration this thread's tile unit holds (nullptr: none since its last release).
thread_local const TileConfig* loaded_config = nullptr;

// Configures the tile unit as `config` unless it already is: a run of calls loads a configuration
// once, not once a pair (release_amx_tiles ends the run).
LS_AMX inline void use_config(const TileConfig& config) {
  if (loaded_config != &config) {
    _tile_loadconfig(&config);
    loaded_config = &config;
  }
}

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

// The thread's buffer for the weight tiles of the pair being multiplied (one for every type),
// 64-byte aligned, at least `bytes` long.
uint8_t* thread_weight_tiles(size_t bytes) {
  struct Buffer {
    uint8_t* data = nullptr;
    size_t capacity = 0;
    ~Buffer() { std::free(data); }
  };
  thread_local Buffer buffer;
  if (buffer.capacity < bytes) {
    std::free(buffer.data);
    buffer.capacity = bytes;
    buffer.data = static_cast<uint8_t*>(std::aligned_alloc(64, bytes));
  }
  return buffer.data;
}

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

// --- The K-quants (Q4_K, Q5_K) --------------------------------------------------------------
//
// A super-block's eight sub-block scales are 6-bit integers under one float scale (d), so they
// go into the weight tiles instead of the float work: scale = 8 hi + lo (both <= 7), and chunk
// c of a super-block (64 elements: sub-blocks 2c and 2c + 1) has a tile of codes times lo and
// one of codes times hi (at most 31 * 7 = 217: unsigned bytes). The products of the four chunks
// accumulate in two sum tiles, lo-sums + 8 hi-sums = Σ_j scale_j Σ q x, the integer the AVX2
// kernel reaches with its 16-bit steps, and the float work is once per super-block: acc +=
// (d * dx) * Σ, then, in a pass of its own, mins += (dmin * dx) * Σ_j min_j x_j as the AVX2
// kernel computes it; y = acc - mins. Same bits. Tiles: tmm0/1 and tmm2/3 the lo and hi sums of
// even and odd super-blocks, tmm4/5 the activations (16 tokens x one 64-element chunk of their
// ActBlockQ8_256 rows), tmm6/7 the lo and hi weights (16 rows of 64 bytes: row i < 8 holds
// elements 4i..4i + 3 of sub-block 2c, row 8 + i those of sub-block 2c + 1, for tile a's rows and
// then tile b's).
constexpr int kChunkBytes = 64;
constexpr int kKWeightRows = 16;
constexpr size_t kKTileBytes = kKWeightRows * kChunkBytes;
constexpr size_t kKBlockBytes = 8 * kKTileBytes;  // a super-block: 4 chunks x (lo, hi)

constexpr TileConfig kKConfig = make_config(kChunkBytes, kKWeightRows);
static_assert(kChunkBytes == kWeightRowBytes);

// Each byte of `v` times the same byte of `f` (unsigned, every product below 256).
LS_AMX inline __m512i mul_bytes(__m512i v, __m512i f) {
  const __m512i low = _mm512_set1_epi16(0x00ff);
  const __m512i even = _mm512_and_si512(_mm512_mullo_epi16(v, _mm512_and_si512(f, low)), low);
  const __m512i odd =
      _mm512_slli_epi16(_mm512_mullo_epi16(_mm512_srli_epi16(v, 8), _mm512_srli_epi16(f, 8)), 8);
  return _mm512_or_si512(even, odd);
}

// Eight bytes of tile a's rows and eight of tile b's (one byte a row: a sub-block's scales)
// spread over a weight tile row: byte k takes the byte of the row that byte k of a 64-byte tile
// row belongs to (tile a's row k / 4 for k < 32, else tile b's row (k - 32) / 4).
LS_AMX inline __m512i spread_rows(const void* a, const void* b) {
  alignas(64) static constexpr auto kSpread = [] {
    std::array<uint8_t, 64> index{};
    for (int k = 0; k < 64; ++k) index[k] = static_cast<uint8_t>((k / 32) * 8 + (k % 32) / 4);
    return index;
  }();
  const __m128i both = _mm_unpacklo_epi64(_mm_loadl_epi64(static_cast<const __m128i*>(a)),
                                          _mm_loadl_epi64(static_cast<const __m128i*>(b)));
  return _mm512_permutexvar_epi8(_mm512_load_si512(kSpread.data()), _mm512_castsi128_si512(both));
}

// A pair's super-block as its eight weight tiles: chunk c's lo tile at 2c, its hi tile at 2c + 1.
template <typename Block>
LS_AMX void k_weight_tiles(const Block& a, const Block& b, uint8_t* out) {
  constexpr bool kFifthBit = std::is_same_v<Block, PackedQ5_KBlock>;
  const __m512i mask = _mm512_set1_epi8(0x0f);
  const __m512i seven = _mm512_set1_epi8(7);
  const __m512i bit4 = _mm512_set1_epi8(0x10);
  for (int c = 0; c < 4; ++c) {
    __m512i lo[2], hi[2];  // sub-blocks 2c and 2c + 1
    for (int h = 0; h < 2; ++h) {
      const __m512i scales = spread_rows(a.scales[2 * c + h], b.scales[2 * c + h]);
      lo[h] = _mm512_and_si512(scales, seven);
      hi[h] = _mm512_and_si512(_mm512_srli_epi16(scales, 3), seven);
    }
    uint8_t* lo_tile = out + 2 * c * kKTileBytes;
    uint8_t* hi_tile = lo_tile + kKTileBytes;
    for (int i = 0; i < 8; ++i) {
      const int g = 8 * c + i;
      const __m512i q = v::load2x32(a.qs + 32 * g, b.qs + 32 * g);
      __m512i low = _mm512_and_si512(q, mask);
      __m512i high = _mm512_and_si512(_mm512_srli_epi16(q, 4), mask);
      if constexpr (kFifthBit) {
        // Bits 2 (g % 4) and 2 (g % 4) + 1 of each byte of qh[g / 4] to bit 4.
        const __m512i bits = _mm512_srli_epi16(v::load2x32(a.qh[g / 4], b.qh[g / 4]), 2 * (g % 4));
        low = _mm512_or_si512(low, _mm512_and_si512(_mm512_slli_epi16(bits, 4), bit4));
        high = _mm512_or_si512(high, _mm512_and_si512(_mm512_slli_epi16(bits, 3), bit4));
      }
      _mm512_store_si512(lo_tile + i * kChunkBytes, mul_bytes(low, lo[0]));
      _mm512_store_si512(lo_tile + (8 + i) * kChunkBytes, mul_bytes(high, lo[1]));
      _mm512_store_si512(hi_tile + i * kChunkBytes, mul_bytes(low, hi[0]));
      _mm512_store_si512(hi_tile + (8 + i) * kChunkBytes, mul_bytes(high, hi[1]));
    }
  }
}

// The mins of a super-block for 16 tokens, as the AVX2 kernel's k_min_sums and its float step.
template <typename Block>
LS_AMX void k_mins(const Block* wa, const Block* wb, int64_t n_blocks, const uint8_t* act,
                   size_t act_stride, __m512 (&mins)[kTokens]) {
  for (int t = 0; t < kTokens; ++t) mins[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const __m512 dmin = v::load_f16x8_pair(wa[b].dmin, wb[b].dmin);
    __m512i pair_mins[4];  // int16: row r's mins of sub-blocks 2p, 2p + 1 in lanes 2r, 2r + 1
    for (int p = 0; p < 4; ++p) {
      pair_mins[p] = _mm512_cvtepu8_epi16(_mm256_inserti128_si256(
          _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wa[b].mins[p]))),
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb[b].mins[p])), 1));
    }
    for (int t = 0; t < kTokens; ++t) {
      const ActBlockQ8_256& x =
          reinterpret_cast<const ActBlockQ8_256*>(act + static_cast<size_t>(t) * act_stride)[b];
      const __m256i groups = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.group_sums));
      const __m128i subs =
          _mm_hadd_epi16(_mm256_castsi256_si128(groups), _mm256_extracti128_si256(groups, 1));
      __m512i min_sum = _mm512_setzero_si512();
      const __m512i pairs[4] = {_mm512_broadcastd_epi32(subs),
                                _mm512_broadcastd_epi32(_mm_srli_si128(subs, 4)),
                                _mm512_broadcastd_epi32(_mm_srli_si128(subs, 8)),
                                _mm512_broadcastd_epi32(_mm_srli_si128(subs, 12))};
      for (int p = 0; p < 4; ++p) {
        min_sum = _mm512_add_epi32(min_sum, _mm512_madd_epi16(pair_mins[p], pairs[p]));
      }
      mins[t] = _mm512_fmadd_ps(_mm512_mul_ps(dmin, _mm512_set1_ps(x.d)),
                                _mm512_cvtepi32_ps(min_sum), mins[t]);
    }
  }
}

// Super-block b's products into sum tiles LO and HI with activation tiles 4 and 5 and weight
// tiles 6 (lo) and 7 (hi).
#define LS_AMX_K_PRODUCTS(LO, HI, b)                                                          \
  do {                                                                                        \
    _tile_zero(LO);                                                                           \
    _tile_zero(HI);                                                                           \
    const uint8_t* codes = act + (b) * sizeof(ActBlockQ8_256) + offsetof(ActBlockQ8_256, qs); \
    const uint8_t* w = weights + (b)*kKBlockBytes;                                            \
    for (int c = 0; c < 4; c += 2) {                                                          \
      _tile_loadd(4, codes + c * kChunkBytes, static_cast<long>(act_stride));                 \
      _tile_loadd(6, w + 2 * c * kKTileBytes, kChunkBytes);                                   \
      _tile_loadd(7, w + (2 * c + 1) * kKTileBytes, kChunkBytes);                             \
      _tile_dpbsud(LO, 4, 6);                                                                 \
      _tile_dpbsud(HI, 4, 7);                                                                 \
      _tile_loadd(5, codes + (c + 1) * kChunkBytes, static_cast<long>(act_stride));           \
      _tile_loadd(6, w + 2 * (c + 1) * kKTileBytes, kChunkBytes);                             \
      _tile_loadd(7, w + (2 * (c + 1) + 1) * kKTileBytes, kChunkBytes);                       \
      _tile_dpbsud(LO, 5, 6);                                                                 \
      _tile_dpbsud(HI, 5, 7);                                                                 \
    }                                                                                         \
  } while (0)

// Tokens t0..t0 + 15 of one pair of K-quant tiles (their ActBlockQ8_256 rows at act, act_stride
// apart); y has the pair's 16 rows of each token. `weights`: k_weight_tiles of every super-block.
// Pipelined as pair_tokens16: super-block b's products, b - 1's sums stored, b - 2's scaled.
template <typename Block>
LS_AMX void k_pair_tokens16(const Block* wa, const Block* wb, int64_t n_blocks,
                            const uint8_t* weights, const uint8_t* act, size_t act_stride, float* y,
                            int64_t y_stride) {
  alignas(64) int32_t sums[2][2][kTokens][kRows];  // [parity][lo, hi]
  __m512 acc[kTokens];
  for (int t = 0; t < kTokens; ++t) acc[t] = _mm512_setzero_ps();
  constexpr long kStride = sizeof sums[0][0][0];
  for (int64_t b = 0; b < n_blocks + 2; ++b) {
    if (b < n_blocks) {
      prefetch_ahead(wa[b]);
      prefetch_ahead(wb[b]);
      if (b % 2 == 0) {
        LS_AMX_K_PRODUCTS(0, 1, b);
      } else {
        LS_AMX_K_PRODUCTS(2, 3, b);
      }
    }
    if (const int64_t stored = b - 1; stored >= 0 && stored < n_blocks) {
      auto& to = sums[stored % 2];
      if (stored % 2 == 0) {
        _tile_stored(0, &to[0][0][0], kStride);
        _tile_stored(1, &to[1][0][0], kStride);
      } else {
        _tile_stored(2, &to[0][0][0], kStride);
        _tile_stored(3, &to[1][0][0], kStride);
      }
    }
    if (const int64_t scaled = b - 2; scaled >= 0) {
      const auto& from = sums[scaled % 2];
      const __m512 d = v::load_f16x8_pair(wa[scaled].d, wb[scaled].d);
      const uint8_t* x = act + scaled * sizeof(ActBlockQ8_256);
      for (int t = 0; t < kTokens; ++t, x += act_stride) {
        const __m512i sum = _mm512_add_epi32(_mm512_load_si512(from[0][t]),
                                             _mm512_slli_epi32(_mm512_load_si512(from[1][t]), 3));
        const float dx = reinterpret_cast<const ActBlockQ8_256*>(x)->d;
        acc[t] =
            _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(dx)), _mm512_cvtepi32_ps(sum), acc[t]);
      }
    }
  }
  __m512 mins[kTokens];
  k_mins(wa, wb, n_blocks, act, act_stride, mins);
  for (int t = 0; t < kTokens; ++t)
    _mm512_storeu_ps(y + t * y_stride, _mm512_sub_ps(acc[t], mins[t]));
}

#undef LS_AMX_K_PRODUCTS

// --- Q6_K -------------------------------------------------------------------------------------
//
// Q6_K's scales are signed 8-bit integers, one per 16 elements, under one float scale a
// super-block: they go into the weight tiles too, in four base-4 digits of their magnitude with
// their sign, scale = Σ_i 4^i d_i (|d_i| <= 3), and chunk c has one tile per digit holding
// (q - 32) * d_i (at most 96 in magnitude: signed bytes). The four sum tiles accumulate the four
// chunks, Σ_i 4^i sums_i = Σ_j scale_j Σ (q - 32) x, the integer the AVX2 kernel reaches as
// Σ_j scale_j Σ q x - 32 Σ_j scale_j x_j, and the float work is acc += (d * dx) * Σ once per
// super-block, as there: the same bits. Tiles as for Q4_K: tmm0-3 the digits' sums, tmm4/5
// activations, tmm6/7 weights (row i < 8 holds elements 4i..4i + 3 of the chunk's first 32,
// row 8 + i of its second 32).
constexpr size_t kQ6BlockBytes = 16 * kKTileBytes;  // a super-block: 4 chunks x 4 digits

// Each byte of `a` times the same byte of `b`, both signed, every product within a byte.
LS_AMX inline __m512i mul_signed_bytes(__m512i a, __m512i b) {
  const __m512i even =
      _mm512_and_si512(_mm512_mullo_epi16(_mm512_srai_epi16(_mm512_slli_epi16(a, 8), 8),
                                          _mm512_srai_epi16(_mm512_slli_epi16(b, 8), 8)),
                       _mm512_set1_epi16(0x00ff));
  const __m512i odd =
      _mm512_slli_epi16(_mm512_mullo_epi16(_mm512_srai_epi16(a, 8), _mm512_srai_epi16(b, 8)), 8);
  return _mm512_or_si512(even, odd);
}

// A pair's super-block as its sixteen weight tiles: chunk c's digit i at 4c + i.
LS_AMX void q6_weight_tiles(const PackedQ6_KBlock& a, const PackedQ6_KBlock& b, uint8_t* out) {
  const __m512i mask = _mm512_set1_epi8(0x0f);
  const __m512i bits45 = _mm512_set1_epi8(0x30);
  const __m512i three = _mm512_set1_epi8(3);
  const __m512i offset = _mm512_set1_epi8(32);
  for (int c = 0; c < 4; ++c) {
    // Each scale group's digits (scale groups 4c..4c + 3: rows 0-3, 4-7, 8-11, 12-15).
    __m512i digits[4][4];  // [group][digit]
    for (int j = 0; j < 4; ++j) {
      const __m512i scales = spread_rows(a.scales[4 * c + j], b.scales[4 * c + j]);
      const __mmask64 negative = _mm512_movepi8_mask(scales);
      const __m512i magnitude = _mm512_abs_epi8(scales);  // 128 stays 0x80: read as unsigned
      for (int i = 0; i < 4; ++i) {
        const __m512i m = _mm512_and_si512(_mm512_srli_epi16(magnitude, 2 * i), three);
        digits[j][i] = _mm512_mask_sub_epi8(m, negative, _mm512_setzero_si512(), m);
      }
    }
    for (int r = 0; r < 8; ++r) {
      const int g = 8 * c + r;
      const __m512i nibbles = v::load2x32(a.nibbles + 32 * g, b.nibbles + 32 * g);
      // The two high bits of group g's low and high elements: bits 4 (g % 2) and
      // 4 (g % 2) + 2 of each byte of qh[g / 2], to bits 4-5.
      const __m512i high_bits =
          _mm512_srli_epi16(v::load2x32(a.qh[g / 2], b.qh[g / 2]), 4 * (g % 2));
      const __m512i low = _mm512_sub_epi8(
          _mm512_or_si512(_mm512_and_si512(nibbles, mask),
                          _mm512_and_si512(_mm512_slli_epi16(high_bits, 4), bits45)),
          offset);
      const __m512i high = _mm512_sub_epi8(
          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(nibbles, 4), mask),
                          _mm512_and_si512(_mm512_slli_epi16(high_bits, 2), bits45)),
          offset);
      for (int i = 0; i < 4; ++i) {
        uint8_t* tile = out + (4 * c + i) * kKTileBytes;
        _mm512_store_si512(tile + r * kChunkBytes, mul_signed_bytes(low, digits[r / 4][i]));
        _mm512_store_si512(tile + (8 + r) * kChunkBytes,
                           mul_signed_bytes(high, digits[2 + r / 4][i]));
      }
    }
  }
}

// Super-block b's products into sum tiles 0-3 (one per digit).
#define LS_AMX_Q6_CHUNK(A, c)                                               \
  do {                                                                      \
    _tile_loadd(A, codes + (c)*kChunkBytes, static_cast<long>(act_stride)); \
    _tile_loadd(6, w + (4 * (c) + 0) * kKTileBytes, kChunkBytes);           \
    _tile_dpbssd(0, A, 6);                                                  \
    _tile_loadd(7, w + (4 * (c) + 1) * kKTileBytes, kChunkBytes);           \
    _tile_dpbssd(1, A, 7);                                                  \
    _tile_loadd(6, w + (4 * (c) + 2) * kKTileBytes, kChunkBytes);           \
    _tile_dpbssd(2, A, 6);                                                  \
    _tile_loadd(7, w + (4 * (c) + 3) * kKTileBytes, kChunkBytes);           \
    _tile_dpbssd(3, A, 7);                                                  \
  } while (0)

// Tokens t0..t0 + 15 of one pair of Q6_K tiles (as k_pair_tokens16). Super-block b's products,
// its sums stored, then b - 1's scaled while the tile unit works on b's.
LS_AMX void q6_pair_tokens16(const PackedQ6_KBlock* wa, const PackedQ6_KBlock* wb, int64_t n_blocks,
                             const uint8_t* weights, const uint8_t* act, size_t act_stride,
                             float* y, int64_t y_stride) {
  alignas(64) int32_t sums[2][4][kTokens][kRows];  // [parity][digit]
  __m512 acc[kTokens];
  for (int t = 0; t < kTokens; ++t) acc[t] = _mm512_setzero_ps();
  constexpr long kStride = sizeof sums[0][0][0];
  for (int64_t b = 0; b <= n_blocks; ++b) {
    if (b < n_blocks) {
      prefetch_ahead(wa[b]);
      prefetch_ahead(wb[b]);
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      const uint8_t* codes = act + b * sizeof(ActBlockQ8_256) + offsetof(ActBlockQ8_256, qs);
      const uint8_t* w = weights + b * kQ6BlockBytes;
      LS_AMX_Q6_CHUNK(4, 0);
      LS_AMX_Q6_CHUNK(5, 1);
      LS_AMX_Q6_CHUNK(4, 2);
      LS_AMX_Q6_CHUNK(5, 3);
      auto& to = sums[b % 2];
      _tile_stored(0, &to[0][0][0], kStride);
      _tile_stored(1, &to[1][0][0], kStride);
      _tile_stored(2, &to[2][0][0], kStride);
      _tile_stored(3, &to[3][0][0], kStride);
    }
    if (const int64_t scaled = b - 1; scaled >= 0) {
      const auto& from = sums[scaled % 2];
      const __m512 d = v::load_f16x8_pair(wa[scaled].d, wb[scaled].d);
      const uint8_t* x = act + scaled * sizeof(ActBlockQ8_256);
      for (int t = 0; t < kTokens; ++t, x += act_stride) {
        __m512i sum = _mm512_load_si512(from[3][t]);
        for (int i = 2; i >= 0; --i) {
          sum = _mm512_add_epi32(_mm512_slli_epi32(sum, 2), _mm512_load_si512(from[i][t]));
        }
        const float dx = reinterpret_cast<const ActBlockQ8_256*>(x)->d;
        acc[t] =
            _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(dx)), _mm512_cvtepi32_ps(sum), acc[t]);
      }
    }
  }
  for (int t = 0; t < kTokens; ++t) _mm512_storeu_ps(y + t * y_stride, acc[t]);
}

#undef LS_AMX_Q6_CHUNK

// The pair's weights as tiles into the thread's buffer, then the tokens sixteen at a time.
template <typename Block>
LS_AMX void tile_pair_amx(const uint8_t* tile_a, const uint8_t* tile_b, int64_t n_blocks,
                          const uint8_t* act, size_t act_stride, int64_t n_tokens, float* y,
                          int64_t y_stride) {
  constexpr bool kKQuant =
      std::is_same_v<Block, PackedQ4_KBlock> || std::is_same_v<Block, PackedQ5_KBlock>;
  constexpr bool kQ6 = std::is_same_v<Block, PackedQ6_KBlock>;
  const auto* wa = reinterpret_cast<const Block*>(tile_a);
  const auto* wb = reinterpret_cast<const Block*>(tile_b);
  const size_t block_bytes = kQ6 ? kQ6BlockBytes : kKQuant ? kKBlockBytes : kWeightTileBytes;
  uint8_t* weights = thread_weight_tiles(static_cast<size_t>(n_blocks) * block_bytes);
  for (int64_t b = 0; b < n_blocks; ++b) {
    prefetch_ahead(wa[b]);
    prefetch_ahead(wb[b]);
    if constexpr (kQ6) {
      q6_weight_tiles(wa[b], wb[b], weights + b * block_bytes);
    } else if constexpr (kKQuant) {
      k_weight_tiles(wa[b], wb[b], weights + b * block_bytes);
    } else {
      weight_tile(wa[b], wb[b], weights + b * block_bytes);
    }
  }
  use_config(kKQuant || kQ6 ? kKConfig : kConfig);
  // The next pair of tiles (the thread's next unit, where that is the same output's) into L2
  // while this pair's products run: with one or two groups of sixteen tokens the conversion
  // above would otherwise wait for its loads.
  if (const ptrdiff_t tile_bytes = tile_b - tile_a; tile_bytes > 0) {
    const uintptr_t next = reinterpret_cast<uintptr_t>(tile_b) + static_cast<uintptr_t>(tile_bytes);
    for (uintptr_t o = 0; o < 2 * static_cast<uintptr_t>(tile_bytes); o += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(next + o), _MM_HINT_T1);
    }
  }
  for (int64_t t = 0; t < n_tokens; t += kTokens) {
    const uint8_t* rows = act + static_cast<size_t>(t) * act_stride;
    if constexpr (kQ6) {
      q6_pair_tokens16(wa, wb, n_blocks, weights, rows, act_stride, y + t * y_stride, y_stride);
    } else if constexpr (kKQuant) {
      k_pair_tokens16(wa, wb, n_blocks, weights, rows, act_stride, y + t * y_stride, y_stride);
    } else {
      pair_tokens16(wa, wb, n_blocks, weights, rows, act_stride, y + t * y_stride, y_stride);
    }
  }
}

}  // namespace

#define LS_AMX_ENTRY(name, Block)                                                               \
  void name(const uint8_t* tile_a, const uint8_t* tile_b, int64_t n_blocks, const uint8_t* act, \
            size_t act_stride, int64_t n_tokens, float* y, int64_t y_stride) {                  \
    tile_pair_amx<Block>(tile_a, tile_b, n_blocks, act, act_stride, n_tokens, y, y_stride);     \
  }
LS_AMX_ENTRY(packed_tile_pair_q8_0_amx, PackedQ8_0Block)
LS_AMX_ENTRY(packed_tile_pair_q4_0_amx, PackedQ4_0Block)
LS_AMX_ENTRY(packed_tile_pair_q4_1_amx, PackedQ4_1Block)
LS_AMX_ENTRY(packed_tile_pair_q4_k_amx, PackedQ4_KBlock)
LS_AMX_ENTRY(packed_tile_pair_q5_k_amx, PackedQ5_KBlock)
LS_AMX_ENTRY(packed_tile_pair_q6_k_amx, PackedQ6_KBlock)
#undef LS_AMX_ENTRY

LS_AMX void release_amx_tiles() {
  if (loaded_config != nullptr) {
    _tile_release();
    loaded_config = nullptr;
  }
}

}  // namespace llamaserve::cpu
