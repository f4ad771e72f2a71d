// The Q8_0 KV cache on the device (attention.h, KvType::kQ8_0): GGUF's Q8_0 block of 32 values
// in two arrays, the 32 int8 codes in the cache array at the value's own index and the f16 scale
// in the scale array at index / 32; a value is code * scale. Apart, the codes of a head's row
// stay 16-byte aligned for wide loads, as the f16 values were.
#pragma once

#include <cstdint>

#include <cuda_fp16.h>

#include "backend/cuda/attention.h"
#include "backend/cuda/formats.cuh"
#include "backend/cuda/mma.cuh"

namespace llamaserve::cuda {

// Stores one block: lane l of a whole warp holds value l. The same rules and float operations as
// the host's encoder (quantize_block_q8_0: d = amax / 127, code = roundf(x / d) by the
// reciprocal), so the bytes equal the CPU cache's.
__device__ __forceinline__ void store_kv_q8_block(float x, int lane, int8_t* codes, __half* scale) {
  float amax = fabsf(x);
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  const float d = amax / 127;
  const float inverse_d = d != 0.0f ? 1.0f / d : 0.0f;
  codes[lane] = static_cast<int8_t>(roundf(x * inverse_d));
  if (lane == 0) *scale = __float2half_rn(d);
}

// Stores one block held by an aligned group of 8 lanes, 4 values a lane (lane `sub` of the group
// holds values 4 sub .. 4 sub + 3): the rules of store_kv_q8_block, a quarter of its warp
// instructions a block (3 shuffles, the divisions shared by 4 blocks at once).
__device__ __forceinline__ void store_kv_q8_block_by_8(float4 x, int sub, int8_t* codes,
                                                       __half* scale) {
  const unsigned group = 0xffu << (threadIdx.x & 24);  // the other groups may have returned
  float amax = fmaxf(fmaxf(fabsf(x.x), fabsf(x.y)), fmaxf(fabsf(x.z), fabsf(x.w)));
#pragma unroll
  for (int offset = 4; offset > 0; offset >>= 1)
    amax = fmaxf(amax, __shfl_xor_sync(group, amax, offset));
  const float d = amax / 127;
  const float inverse_d = d != 0.0f ? 1.0f / d : 0.0f;
  const auto code = [&](float v) {
    return static_cast<uint32_t>(static_cast<uint8_t>(static_cast<int8_t>(roundf(v * inverse_d))));
  };
  reinterpret_cast<uint32_t*>(codes)[sub] =
      code(x.x) | code(x.y) << 8 | code(x.z) << 16 | code(x.w) << 24;
  if (sub == 0) *scale = __float2half_rn(d);
}

// Code i of the four packed in `word` (i = 0: the lowest address), as a float: code + 128 as an
// unsigned byte through byte_as_float (a byte permute and a subtraction, not an integer-to-float
// conversion at a quarter of the rate).
__device__ __forceinline__ float kv_code(uint32_t word, int i) {
  return byte_as_float(word ^ 0x80808080u, i, 128.0f);
}

// Codes 2 pair and 2 pair + 1 of the four in `flipped` (packed codes with their sign bits
// flipped: word ^ 0x80808080, i.e. code + 128 as unsigned bytes) as an exact f16 pair, the lower
// address in the low half.
__device__ __forceinline__ __half2 kv_code_pair(uint32_t flipped, int pair) {
  return byte_pair_as_half2(flipped, pair, 128.0f);
}

// Eight codes (two words) times `scale` (an f16 value) as eight f16 values packed in a uint4,
// each rounded once from the exact product, as __float2half_rn(code * scale) would be: three
// instructions for two values (kv_code_pair and one multiplication).
__device__ __forceinline__ uint4 kv_codes_to_half8(uint32_t lo, uint32_t hi, float scale) {
  const __half2 d = __float2half2_rn(scale);
  const uint32_t words[2] = {lo ^ 0x80808080u, hi ^ 0x80808080u};
  uint32_t out[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __half2 values = __hmul2(kv_code_pair(words[i / 2], i % 2), d);
    out[i] = half2_bits(values);
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

}  // namespace llamaserve::cuda
