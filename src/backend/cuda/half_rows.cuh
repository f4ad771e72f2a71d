// Device side of HalfRows (elementwise.h): the one conversion of activations to a GEMM's half
// input, shared by convert_to_half and the producers that write it directly (RMSNorm, SwiGLU).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/elementwise.h"

namespace llamaserve::cuda {

// f16 saturates to ±65504 (a large activation must not become inf); bf16 has float's range.
__device__ __forceinline__ void store_half(const HalfRows& h, int64_t r, int64_t c, float v) {
  if (h.type == HalfType::kF16) {
    static_cast<__half*>(h.data)[r * h.stride + c] =
        __float2half_rn(fminf(fmaxf(v, -65504.0f), 65504.0f));
  } else {
    static_cast<__nv_bfloat16*>(h.data)[r * h.stride + c] = __float2bfloat16_rn(v);
  }
}

// Elements c to c + 3 of row r (c % 4 == 0; rows 8-byte aligned): one 8-byte store, each
// element converted as store_half does.
__device__ __forceinline__ void store_half4(const HalfRows& h, int64_t r, int64_t c, float4 v) {
  uint32_t lo, hi;
  if (h.type == HalfType::kF16) {
    auto sat = [](float x) { return fminf(fmaxf(x, -65504.0f), 65504.0f); };
    const __half2 a = __floats2half2_rn(sat(v.x), sat(v.y));
    const __half2 b = __floats2half2_rn(sat(v.z), sat(v.w));
    lo = *reinterpret_cast<const uint32_t*>(&a);
    hi = *reinterpret_cast<const uint32_t*>(&b);
  } else {
    const __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y);
    const __nv_bfloat162 b = __floats2bfloat162_rn(v.z, v.w);
    lo = *reinterpret_cast<const uint32_t*>(&a);
    hi = *reinterpret_cast<const uint32_t*>(&b);
  }
  *reinterpret_cast<uint2*>(static_cast<uint16_t*>(h.data) + r * h.stride + c) = make_uint2(lo, hi);
}

// Elements c to c + 3 of a row of halves (c % 4 == 0; the row 8-byte aligned) as floats: one
// 8-byte load at L2.
__device__ __forceinline__ float4 load_half4(const void* row, int64_t c, bool bf16) {
  const uint2 bits = __ldcg(reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(row) + c));
  if (bf16) {
    return make_float4(__uint_as_float(bits.x << 16), __uint_as_float(bits.x & 0xffff0000u),
                       __uint_as_float(bits.y << 16), __uint_as_float(bits.y & 0xffff0000u));
  }
  const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&bits.x));
  const float2 hi = __half22float2(*reinterpret_cast<const __half2*>(&bits.y));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}

}  // namespace llamaserve::cuda
