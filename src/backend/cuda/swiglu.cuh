// SwiGLU's one formula on the device, shared by silu_mul (elementwise.h) and the products that
// write its rows in their epilogue (quant_mma.h), so that both give the same bits.
#pragma once

namespace llamaserve::cuda {

// silu(g) * u, silu(g) = g / (1 + e^-g).
__device__ __forceinline__ float silu_times(float g, float u) {
  return g / (1.0f + __expf(-g)) * u;
}

}  // namespace llamaserve::cuda
