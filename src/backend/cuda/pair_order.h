// The order of 8-bit and 4-bit codes on the device: every 4-byte word of codes, weights and 8-bit
// activations alike, holds its elements 4j, 4j + 1, 4j + 2, 4j + 3 in bytes 0, 2, 1, 3 ("pair
// order"; the GGUF order with each word's middle bytes swapped, its own inverse). Bytes 0 and 2,
// and 1 and 3, then hold consecutive elements: one mask of a word of 4-bit codes (one LOP3) puts
// two consecutive codes into the two halves of an f16 pair (formats.cuh), and a byte permute
// does the same for 8-bit ones, while dp4a multiplies words of weights and activations that
// share the order. upload_matrix puts weights in it; the 8-bit activation writers
// (act_quant.cuh) write it.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace llamaserve::cuda {

// The byte of a word-aligned run of codes that holds element i (and the element byte i holds).
__host__ __device__ constexpr int64_t pair_order_byte(int64_t i) {
  return (i & ~int64_t{3}) | ((i & 1) << 1) | ((i >> 1) & 1);
}

// Where the codes lie in each block of a type's device quants (after any split): `bytes` bytes
// from `offset` of every block of block_bytes (repack.h's pair_order_codes).
struct PairOrderCodes {
  int block_bytes;
  int offset;
  int bytes;
};

// The byte offset in a matrix's device quants of word i of its codes (block i / (bytes / 4) in
// row-major order, rows quant_row_bytes apart): the word that thread i of the upload's swap
// turns, and the host tests' layout too.
__host__ __device__ inline int64_t pair_order_word_offset(const PairOrderCodes& codes, int64_t i,
                                                          int64_t blocks_per_row,
                                                          int64_t quant_row_bytes) {
  const int64_t words = codes.bytes / 4;
  const int64_t block = i / words;
  return block / blocks_per_row * quant_row_bytes + block % blocks_per_row * codes.block_bytes +
         codes.offset + 4 * (i % words);
}

}  // namespace llamaserve::cuda
