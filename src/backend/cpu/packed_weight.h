// Quantized weights (Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K) with their rows interleaved in tiles
// of eight, built once when a CPU backend is created. In a tile's block b the eight rows' scales
// lie side by side and their quant bytes are interleaved four at a time, so that one 32-byte load
// holds four elements of each of the eight rows: one integer multiply-add against four broadcast
// activation bytes then advances all eight dot products, each in its own int32 lane. No horizontal
// sums, and one conversion serves eight block scales: kernels that take one row at a time spend
// most of their instructions on those at one token (docs/dev/cpu-experiments.md has the
// measurements).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "backend/cpu/act_quant.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "model/weights.h"
#include "quant/blocks.h"

namespace llamaserve::cpu {

constexpr int64_t kPackedRows = 8;

// How far ahead of the block being multiplied the kernels prefetch the tile bytes. A thread
// streams its tiles front to back, and one core pulls memory faster with these requests in
// flight than with the hardware prefetchers alone: SmolLM2 Q4_1 decode at one thread went from
// 85-130 to 165-194 tok/s on a Xeon, and on an EPYC the one-thread Q4_1 matrix-vector product
// from 15 to 20 GB/s (decode 0-15%); 4 KiB ahead beat 1 KiB on the Xeon, 1-16 KiB were alike on
// the EPYC (docs/dev/cpu-experiments.md). Farther would mostly reach into the next thread's
// tiles of the small matrices. The lines go to L2 (T1), whose miss queue holds more requests
// than L1's fill buffers: one-thread decode on a 2-core Xeon +21% against L1 (T0). The
// AVX-512 kernels of two tiles read two streams a tile apart and prefetch a whole pair ahead
// instead (dot_packed_avx512.cc).
constexpr size_t kPrefetchAhead = 4096;

// Block b of rows 8i..8i+7. qs: byte 32 * g + 4 * r + c holds row r's qs[4 * g + c], i.e.
// element 4g + c in its low nibble and 16 + 4g + c in its high one (Q4 nibble order).
// Act: the activation block the kernels read with it (act_quant.h).
struct PackedQ4_0Block {
  using Act = ActBlockQ8_32x2;
  Half d[kPackedRows];
  uint8_t qs[16 * kPackedRows];
};
struct PackedQ4_1Block {
  using Act = ActBlockQ8_32x2;
  Half d[kPackedRows];
  Half m[kPackedRows];
  uint8_t qs[16 * kPackedRows];
};
// Q8_0: byte 32 * g + 4 * r + c holds row r's qs[4 * g + c], g < 8.
struct PackedQ8_0Block {
  using Act = ActBlockQ8_32;
  Half d[kPackedRows];
  int8_t qs[32 * kPackedRows];
};
// Q4_K, one super-block of 256 elements: the sub-block scales and mins unpacked from their
// 6-bit form; scales[j][r] = row r's scale of sub-block j; mins[p][2 * r + k] = row r's min of
// sub-block 2p + k (pairs, for one 16-bit multiply-add against two activation sub-block sums);
// qs as in Q4 (g < 32; chunk c = g / 8 holds sub-block 2c in the low nibbles, 2c + 1 in the high).
struct PackedQ4_KBlock {
  using Act = ActBlockQ8_256;
  Half d[kPackedRows];
  Half dmin[kPackedRows];
  uint8_t scales[8][kPackedRows];
  uint8_t mins[4][2 * kPackedRows];
  uint8_t qs[128 * kPackedRows];
};
// Q5_K: Q4_K's block, and qh[p] holds the fifth bits of groups 4p..4p + 3, byte 4 * r + c: bit
// 2i of group 4p + i's low element, bit 2i + 1 of its high one.
struct PackedQ5_KBlock : PackedQ4_KBlock {
  uint8_t qh[8][32];
};
// Q6_K, one super-block: element e of a row is q = low | high << 4 (0..63), w = d * scale[e / 16]
// * (q - 32). nibbles as Q4_K's qs (chunk k = g / 8 holds elements 64k + l in the low nibbles and
// 64k + 32 + l in the high ones); qh[p] holds the two high bits of groups 2p and 2p + 1, byte
// 4 * r + c: bits 0-1 and 2-3 for group 2p's low and high element, 4-5 and 6-7 for group
// 2p + 1's; scales[j][r] = row r's scale of elements 16j..16j + 15.
struct PackedQ6_KBlock {
  using Act = ActBlockQ8_256;
  Half d[kPackedRows];
  int8_t scales[16][kPackedRows];
  uint8_t nibbles[128 * kPackedRows];
  uint8_t qh[16][32];
};
static_assert(sizeof(PackedQ4_0Block) == kPackedRows * sizeof(BlockQ4_0));
static_assert(sizeof(PackedQ4_1Block) == kPackedRows * sizeof(BlockQ4_1));
static_assert(sizeof(PackedQ8_0Block) == kPackedRows * sizeof(BlockQ8_0));
static_assert(sizeof(PackedQ4_KBlock) == kPackedRows * (sizeof(BlockQ4_K) + 4));
static_assert(sizeof(PackedQ5_KBlock) == kPackedRows * (sizeof(BlockQ5_K) + 4));
static_assert(sizeof(PackedQ6_KBlock) == kPackedRows * sizeof(BlockQ6_K));

// The packed copy of one weight matrix: tiles of kPackedRows rows, the last one padded with
// zero rows (scale 0), each tile its row's blocks in order.
class PackedWeight {
 public:
  // Whether `type` has a packed form.
  static constexpr bool packs(TensorType type) {
    return type == TensorType::Q4_0 || type == TensorType::Q4_1 || type == TensorType::Q8_0 ||
           type == TensorType::Q4_K || type == TensorType::Q5_K || type == TensorType::Q6_K;
  }

  // PRECONDITION: packs(w.type), w.cols() a multiple of the type's block.
  static Result<PackedWeight> pack(const QTensor& w, ThreadPool& pool);

  TensorType type() const { return type_; }
  int64_t rows() const { return rows_; }
  int64_t n_blocks() const { return n_blocks_; }  // per row
  int64_t n_tiles() const { return (rows_ + kPackedRows - 1) / kPackedRows; }
  const uint8_t* tile(int64_t i) const {
    return data_.get() + static_cast<size_t>(i) * tile_bytes_;
  }
  size_t bytes() const { return static_cast<size_t>(n_tiles()) * tile_bytes_; }

 private:
  struct Free {
    void operator()(uint8_t* p) const;
  };
  TensorType type_ = TensorType::Q4_0;
  int64_t rows_ = 0;
  int64_t n_blocks_ = 0;
  size_t tile_bytes_ = 0;
  std::unique_ptr<uint8_t, Free> data_;
};

// y[t * y_stride + r] = dot(row r of the tile, activation row t) for r < n_rows (<= 8) and
// t < n_tokens; activation row t at act + t * act_stride in ActFormat::kQ8_32x2 (Q4_0, Q4_1) or
// kQ8_32 (Q8_0) or kQ8_256 (the K-quants). Tokens go four at a time through the weight bytes, then
// one at a time; each token's result is the same either way.
using PackedTile = void(const uint8_t* tile, int64_t n_blocks, const uint8_t* act,
                        size_t act_stride, int64_t n_tokens, float* y, int64_t y_stride,
                        int64_t n_rows);
using PackedTileFn = PackedTile*;

// The AVX2 kernels (dot_packed.cc).
PackedTile packed_tile_q4_0, packed_tile_q4_1, packed_tile_q8_0, packed_tile_q4_k, packed_tile_q5_k,
    packed_tile_q6_k;
// The AVX-512 versions (dot_packed_avx512.cc), compiled for AVX-512 VNNI (Q8_0, Q4_0, Q4_1:
// vpdpbusd in place of maddubs + add + madd; the K-quants: the same 16-bit code as AVX2): the
// same int32 sums and the same float operations, so the same bits. Only where
// cpu_has_avx512_vnni().
PackedTile packed_tile_q4_0_avx512, packed_tile_q4_1_avx512, packed_tile_q8_0_avx512,
    packed_tile_q4_k_avx512, packed_tile_q5_k_avx512, packed_tile_q6_k_avx512;

// Two whole tiles side by side (rows 8i..8i+15 when tile_b follows tile_a): y[t * y_stride + r]
// for r < 16, each row the same bits as PackedTile's. AVX-512 only (Q4_0, Q4_1, Q8_0: a tile's
// eight row lanes are half a register there).
using PackedTilePair = void(const uint8_t* tile_a, const uint8_t* tile_b, int64_t n_blocks,
                            const uint8_t* act, size_t act_stride, int64_t n_tokens, float* y,
                            int64_t y_stride);
using PackedTilePairFn = PackedTilePair*;
PackedTilePair packed_tile_pair_q4_0_avx512, packed_tile_pair_q4_1_avx512,
    packed_tile_pair_q8_0_avx512;

// The AMX versions (dot_packed_amx.cc): n_tokens a multiple of kAmxTokens, activation rows in
// ActFormat::kQ8_32Planar (Q8_0, Q4_0, Q4_1; 64-byte aligned) or kQ8_256 (the K-quants); each
// output the bits of the AVX-512 kernels' (for the K-quants, of PackedTile's for each row). Only
// where cpu_has_amx_int8(). They leave the calling thread's tile unit configured, so that a run
// of calls configures it once: the thread calls release_amx_tiles() after its last call of a run
// (before it waits or runs other code).
inline constexpr int64_t kAmxTokens = 16;
PackedTilePair packed_tile_pair_q4_0_amx, packed_tile_pair_q4_1_amx, packed_tile_pair_q8_0_amx,
    packed_tile_pair_q4_k_amx, packed_tile_pair_q5_k_amx, packed_tile_pair_q6_k_amx;
void release_amx_tiles();

}  // namespace llamaserve::cpu
