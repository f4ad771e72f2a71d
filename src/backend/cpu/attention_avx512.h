// AVX-512 pieces of attention() over an f16 or a Q8_0 cache for several query heads of one KV
// head at once: each K and V row of a cache block is loaded and converted once for all of them,
// instead of once per head, and in 16-lane registers. Every head's products and sums are
// attention.cc's AVX2 ones lane for lane and in the same order (the f16 keys' scores sixteen keys
// a register where attention.cc takes eight; elsewhere two of its 8-lane accumulators side by
// side in one 16-lane register), so the results are the same bits on either path.
// Only code chosen at run time after cpu_has_avx512_vnni() may call them.
#pragma once

#include <cstdint>

#include "quant/blocks.h"

namespace llamaserve::cpu {

// s[h * s_stride + j] = scale * (q + h * head_dim) · key j for the n_heads heads and the first
// keys j below n_keys, returning how many: f16 keys (dimension-major in a block of block_size,
// value d of key j at keys[d * block_size + j]) sixteen at a time as long as the block holds
// them whole, so up to n_keys where block_size is a multiple of 16 (the scores of slots past
// n_keys are written too, and s[h * s_stride + j] must have room up to block_size); Q8_0 keys
// (keys[j] the j-th row of head_dim / 32 blocks) eight at a time below n_keys. PRECONDITION:
// head_dim % 16 == 0 (f16), head_dim % 32 == 0 (Q8_0).
int32_t block_scores_heads_avx512(const float* q, int32_t n_heads, const uint16_t* keys,
                                  int32_t block_size, int32_t n_keys, int64_t head_dim, float scale,
                                  float* s, int64_t s_stride);
int32_t block_scores_heads_avx512(const float* q, int32_t n_heads, const BlockQ8_0* keys,
                                  int32_t n_keys, int64_t head_dim, float scale, float* s,
                                  int64_t s_stride);

// For each of the n_heads heads h: acc_h = acc_h * keep[h] + Σ_j p[h * p_stride + j] *
// values[j] over the n_rows value rows (the j-th row of head_dim values, f16 or Q8_0 blocks),
// acc_h at acc + h * head_dim. Same preconditions.
void accumulate_values_heads_avx512(float* acc, const float* keep, const float* p, int64_t p_stride,
                                    int32_t n_heads, const uint16_t* values, int32_t n_rows,
                                    int64_t head_dim);
void accumulate_values_heads_avx512(float* acc, const float* keep, const float* p, int64_t p_stride,
                                    int32_t n_heads, const BlockQ8_0* values, int32_t n_rows,
                                    int64_t head_dim);

}  // namespace llamaserve::cpu
