// Encoders of one block, internal to the quant library (quant.h is the public entry point).
// Each reads the block's elements from x (32 or 256 floats) and fills every byte of *block.
#pragma once

#include "quant/blocks.h"

namespace llamaserve::quant_internal {

// ggml's reference rules, reproduced so that the bytes equal llama.cpp's and gguf-py's.
void quantize_block_q8_0(const float* x, BlockQ8_0* block);
void quantize_block_q4_0(const float* x, BlockQ4_0* block);
void quantize_block_q4_1(const float* x, BlockQ4_1* block);

// Error-minimising searches (quantize_k.cc).
void quantize_block_q4_k(const float* x, BlockQ4_K* block);
void quantize_block_q5_k(const float* x, BlockQ5_K* block);
void quantize_block_q6_k(const float* x, BlockQ6_K* block);

// Bit packing, the exact inverses of the decode helpers in blocks.h; exposed for tests.
// sc/m: 8 values in [0, 63].
void pack_q4_k_scales(const uint8_t* sc, const uint8_t* m, uint8_t* scales);
// q: 256 values in [0, 15] (Q4_K) or [0, 31] (Q5_K; qh receives bit 4).
void pack_k_quants(const uint8_t* q, uint8_t* qs, uint8_t* qh);
// q: 256 values in [-32, 31].
void pack_q6_k_quants(const int8_t* q, uint8_t* ql, uint8_t* qh);

}  // namespace llamaserve::quant_internal
