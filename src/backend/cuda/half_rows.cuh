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

}  // namespace llamaserve::cuda
