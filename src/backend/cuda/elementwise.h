// Elementwise kernels of the forward pass. Matrices are row-major with explicit row strides
// (in elements); n_rows × n elements are touched.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "backend/cuda/act_quant.h"
#include "backend/cuda/launch.h"
#include "core/status.h"

namespace llamaserve::cuda {

enum class HalfType { kF16, kBF16 };

// Rows of halves a producer writes as a GEMM's input (GemmWorkspace::act_half, gemm.h): row r
// at data + r * stride elements, converted as convert_to_half does. data == nullptr: none.
struct HalfRows {
  void* data = nullptr;
  int64_t stride = 0;
  HalfType type = HalfType::kF16;
};

// dst = x as f16 (saturated to ±65504, so a large activation cannot become inf) or bf16.
// PRECONDITION: dst_stride is even (rows stay 4-byte aligned).
Status convert_to_half(const float* x, int64_t x_stride, int64_t n_rows, int64_t n, void* dst,
                       int64_t dst_stride, HalfType type, LaunchStream stream);

// out = silu(gate) * up, silu(g) = g / (1 + e^-g). out may alias gate or up. When out_q.qs is
// set, the rows are also written as 8-bit blocks (act_quant.h; PRECONDITION: n % 32 == 0).
// When out_half.data is set, they are written as halves there instead of to out (which may
// then be null; not with out_q).
Status silu_mul(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride,
                int64_t n_rows, int64_t n, float* out, int64_t out_stride, LaunchStream stream,
                const Q8Rows& out_q = {}, const HalfRows& out_half = {});

// x += y.
Status add_inplace(float* x, int64_t x_stride, const float* y, int64_t y_stride, int64_t n_rows,
                   int64_t n, LaunchStream stream);

// x += y, y halves of `type` (a tensor-parallel sum of half partials).
Status add_half(float* x, int64_t x_stride, const void* y, int64_t y_stride, HalfType type,
                int64_t n_rows, int64_t n, LaunchStream stream);

// y[i, c] += bias[c].
Status add_bias(float* y, int64_t y_stride, const float* bias, int64_t n_rows, int64_t n,
                LaunchStream stream);

// dst row i = src row row_ids[i] (device array). The rows whose logits are wanted, gathered
// before the final norm and the output projection.
Status gather_rows(const float* src, int64_t src_stride, const int32_t* row_ids, int64_t n_rows,
                   int64_t n, float* dst, int64_t dst_stride, LaunchStream stream);

}  // namespace llamaserve::cuda
