// 8-bit activation blocks: the fast matmul path quantizes each activation row once per
// matmul input so that quantized weights are multiplied with integer dot products.
// These are working formats of the CPU kernels, never stored in files.
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/types.h"

namespace llamaserve::cpu {

// For weights in 32-element blocks (Q8_0, Q4_0, Q4_1): x[i] ≈ d * qs[i].
// sum = d * Σ qs, so that a weight offset (Q4_0's -8, Q4_1's m) costs one multiply per block.
struct ActBlockQ8_32 {
  float d;
  float sum;
  int8_t qs[32];
};

// For the K-quants (Q4_K, Q5_K, Q6_K): 256 elements, one scale, and Σ qs per 16-element group
// for the weights' per-sub-block mins and offsets.
struct ActBlockQ8_256 {
  float d;
  int16_t group_sums[16];
  int8_t qs[256];
};

// Two ActBlockQ8_32 (blocks 2k and 2k+1) rearranged for 4-bit weights, whose bytes hold
// element j in the low nibble and j + 16 in the high one: `low` pairs with the low nibbles of
// both weight blocks loaded side by side, `high` with their high nibbles, so that one 32-byte
// nibble split serves two blocks. For an odd block count the last pair's second half is zero.
struct ActBlockQ8_32x2 {
  float scale_sum[4];  // d0, sum0, d1, sum1
  int8_t low[32];      // block 0 elements 0..15, block 1 elements 0..15
  int8_t high[32];     // block 0 elements 16..31, block 1 elements 16..31
};

// ActBlockQ8_32's blocks of a row taken apart, for the AMX kernels, which load one block's
// codes of sixteen rows as a tile (rows act_row_bytes apart): every block's 32 codes first, each
// 32-byte piece within one cache line of a 64-byte aligned row, then the blocks' scales d, then
// their sums; the row padded to a multiple of 64 bytes. The same values as kQ8_32.
struct ActRowQ8_32Planar {
  int8_t* qs;
  float* d;
  float* sum;
};
ActRowQ8_32Planar planar_row(void* row, int64_t n_blocks);
inline const int8_t* planar_codes(const void* row, int64_t block) {
  return static_cast<const int8_t*>(row) + 32 * block;
}
inline const float* planar_scales(const void* row, int64_t n_blocks) {
  return reinterpret_cast<const float*>(static_cast<const int8_t*>(row) + 32 * n_blocks);
}
inline const float* planar_sums(const void* row, int64_t n_blocks) {
  return planar_scales(row, n_blocks) + n_blocks;
}

static_assert(sizeof(ActBlockQ8_32) == 40);
static_assert(sizeof(ActBlockQ8_32x2) == 80);
static_assert(sizeof(ActBlockQ8_256) == 292);

// Which representation of the activation row a weight type's dot product consumes.
enum class ActFormat { kF32, kQ8_32, kQ8_32x2, kQ8_256, kQ8_32Planar };

// Bytes of one activation row of n elements. PRECONDITION: n is a multiple of the block.
size_t act_row_bytes(ActFormat format, int64_t n);

// Converts one row of n floats. kF32 copies.
void quantize_act_row(ActFormat format, const float* x, void* out, int64_t n);

// Reference versions (scalar), used by the tests of the SIMD versions above.
void quantize_act_row_q8_32_ref(const float* x, ActBlockQ8_32* out, int64_t n);
void quantize_act_row_q8_256_ref(const float* x, ActBlockQ8_256* out, int64_t n);

}  // namespace llamaserve::cpu
