// The arithmetic of the 8-bit activation blocks (act_quant.h), shared by the host reference,
// the quantize kernel and the producers that write 8-bit blocks directly (rmsnorm, silu_mul).
#pragma once

#include <cmath>
#include <cstdint>

#include "backend/cuda/act_quant.h"

namespace llamaserve::cuda {

__host__ __device__ __forceinline__ float q8_scale(float amax) { return amax / 127.0f; }

__host__ __device__ __forceinline__ float q8_inverse(float d) { return d > 0.0f ? 1.0f / d : 0.0f; }

// |x · inv| <= 127 up to two roundings, so the clamp only guards against NaN-free overshoot.
__host__ __device__ __forceinline__ int q8_code(float x, float inv) {
#if defined(__CUDA_ARCH__)
  const int q = __float2int_rn(x * inv);
#else
  const int q = static_cast<int>(std::nearbyint(x * inv));
#endif
  return q < -127 ? -127 : q > 127 ? 127 : q;
}

__host__ __device__ __forceinline__ float4 q8_block_sums(float d, int sum_low, int sum_high) {
  return make_float4(d, d * static_cast<float>(sum_low + sum_high), d * static_cast<float>(sum_low),
                     d * static_cast<float>(sum_high));
}

#if defined(__CUDACC__)
// One warp quantizes one block: lane i holds element i (v) and writes its code (in pair order);
// lane 0 writes ds.
// PRECONDITION: all 32 lanes of the warp call it together.
__device__ __forceinline__ void quantize_q8_warp(float v, int lane, int8_t* q, float4* ds) {
  float amax = fabsf(v);
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  const float d = q8_scale(amax);
  const int code = q8_code(v, q8_inverse(d));
  q[pair_order_byte(lane)] = static_cast<int8_t>(code);
  int sum = code;  // over the lane's half-warp after offsets 1..8
#pragma unroll
  for (int offset = 1; offset < 16; offset <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  const int other_half = __shfl_xor_sync(0xffffffffu, sum, 16);
  if (lane == 0) *ds = q8_block_sums(d, sum, other_half);
}

// Sixteen lanes quantize one block, two consecutive elements each: lane l of each half-warp
// holds elements 2 (l % 16) and 2 (l % 16) + 1 of its half-warp's block (q, ds).
// PRECONDITION: all 32 lanes of the warp call it together.
__device__ __forceinline__ void quantize_q8_pairs(float2 v, int lane, int8_t* q, float4* ds) {
  float amax = fmaxf(fabsf(v.x), fabsf(v.y));
#pragma unroll
  for (int offset = 8; offset > 0; offset >>= 1)
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  const float d = q8_scale(amax);
  const float inv = q8_inverse(d);
  const int c0 = q8_code(v.x, inv), c1 = q8_code(v.y, inv);
  const int l = lane & 15;
  // Elements 2l and 2l + 1 are two bytes apart in pair order.
  q[pair_order_byte(2 * l)] = static_cast<int8_t>(c0);
  q[pair_order_byte(2 * l + 1)] = static_cast<int8_t>(c1);
  int sum = c0 + c1;  // over the lane's eight lanes (16 elements) after offsets 1..4
#pragma unroll
  for (int offset = 1; offset < 8; offset <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  const int other_half = __shfl_xor_sync(0xffffffffu, sum, 8);
  if (l == 0) *ds = q8_block_sums(d, sum, other_half);
}
#endif

}  // namespace llamaserve::cuda
