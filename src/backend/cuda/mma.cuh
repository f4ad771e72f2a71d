// Tensor-core helpers of the attention and quantized-product kernels (attention_mma.cu,
// attention_decode_mma.cu, quant_mma.cu): the mma itself and the f16 pairs of its fragments.
//
// Fragment layouts of mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 (PTX ISA, "Matrix
// Fragments for mma.m16n8k16 with floating point type"), with g = lane / 4 and c = lane % 4:
//   A (16 × 16, row major), four .b32 registers of two f16 each (low half = lower column):
//     a[0] = A[g    ][2c, 2c + 1]      a[1] = A[g + 8][2c, 2c + 1]
//     a[2] = A[g    ][2c + 8, 2c + 9]  a[3] = A[g + 8][2c + 8, 2c + 9]
//   B (16 × 8, K × N, "col": each thread holds two consecutive k of one column n = g):
//     b[0] = B[2c, 2c + 1][g]          b[1] = B[2c + 8, 2c + 9][g]
//   C, D (16 × 8, fp32):
//     c[0], c[1] = C[g][2c, 2c + 1]    c[2], c[3] = C[g + 8][2c, 2c + 1]
#pragma once

#include <cstdint>

#include <cuda_fp16.h>

#include "backend/cuda/formats.cuh"

namespace llamaserve::cuda {

// c += A · B for one m16n8k16 tile (layouts above).
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 2^x; 2^-inf = 0.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Bytes 2 pair and 2 pair + 1 of `word` (unsigned codes, the lower address in the low half) minus
// `bias`, as an exact f16 pair (bytes_as_half2, formats.cuh).
__device__ __forceinline__ __half2 byte_pair_as_half2(uint32_t word, int pair, float bias) {
  const uint32_t first = 2 * static_cast<uint32_t>(pair);
  return bytes_as_half2(word, first, first + 1, bias);
}

// Two floats as an f16 pair, the first in the low half (the lower column of a fragment).
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  return half2_bits(__floats2half2_rn(lo, hi));
}

}  // namespace llamaserve::cuda
