// Products of quantized weights with a few dozen activation rows on tensor cores, straight from
// the weights' device layout: Y = X W^T for X of up to kQuantMmaRows rows at a time.
//
// Between the matvec (matvec.h: integer dots, each weight decoded once per 8 activation rows)
// and the GEMM (gemm.h: the weights dequantized into an f16 copy that cuBLAS then reads), a
// batch of 5 to 64 rows did badly either way: the matvec's integer work grows with every row
// and it decodes the weights again every 8 rows, and the copy is written and read again at 3.6
// times the bytes of Q4_K weights (bench/results/2026-12-01-h200-quant-mma.md). Here each weight is
// read once per kQuantMmaRows rows, decoded to f16 in registers and multiplied with mma.sync
// (m16n8k16, f16 inputs, fp32 sums): the weights are the A operand (16 rows an mma), the
// activations B (8 rows an mma).
//
// The decode runs in half precision: a code c becomes the half (c - bias) exactly (two codes a
// byte permute and a subtraction; Q4_K's, kept in pair order on the device, a LOP3 and a
// subtraction) and one f16 multiply (Q8_0, Q4_0, Q6_K) or fma (Q4_1, Q4_K, Q5_K) applies its
// run's scale and min, each rounded to f16. Where the scale is itself an f16 (Q8_0, Q4_0) the
// weight is exactly dequantize_rows' f16 copy; for the others it is within an f16 rounding of
// the run's scale and min of it (2^-11 of |c scale| + |min|, once more than the copy).
//
// Geometry: a CTA of 8 warps (16 for up to 16 activation rows) owns 32 weight rows; its warps
// split the row's units (formats.cuh) into contiguous ranges, and their fp32 partials are added
// in shared memory in a fixed order (the result does not depend on timing). In one step lane
// (g, q) = (lane / 4, lane % 4) of a warp loads its part of units 4t .. 4t + 3 of rows g, g + 8,
// g + 16 and g + 24 (quant_mma_lanes.cuh: unit 4t + q whole, or above 32 activation rows, for
// every type but Q5_K, 8 bytes of two units, so that a quad's activation loads are whole
// sectors), and feeds its elements to the
// mma k-slots 2q, 2q + 1, 2q + 8, 2q + 9 four at a time: the k dimension is the row's elements
// in an order of the lanes' making, and the activations are read in that same order (8
// elements a 16-byte load): into registers before each run's decode with up to 4 tiles of
// activation rows, and with 6 or 8 (252 registers, one CTA an SM) through a ring in shared
// memory that each warp fills by cp.async three half runs ahead (7B Q4_K_M at 64 sequences
// 8437-8468 against 7981-7996 tok/s, bench/results/2026-12-04-h200-quant-mma-activation-ring.md).
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "backend/cuda/device_matrix.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/launch.h"
#include "core/status.h"

namespace llamaserve::cuda {

// Activation rows one pass of the kernel multiplies; larger batches take several passes.
inline constexpr int kQuantMmaRows = 64;

struct QuantMmaArgs {
  DeviceMatrix w;                // quantized (quant_mma_supported)
  const void* x_half = nullptr;  // f16, 16-byte aligned, row b at x_half + b * x_stride elements
  int64_t x_stride = 0;          // elements; a multiple of 8, >= w.cols
  int64_t n_rows = 0;
  float* y = nullptr;  // y[b * y_stride + r]
  int64_t y_stride = 0;
  void* y_half = nullptr;  // instead of y: f16 outputs (no bias, no accumulate)
  // Instead of y: w's first rows / 2 rows are a gate, the others its up projection, and the
  // kernel writes SwiGLU's rows silu(gate) * up (swiglu.cuh) as halves here, rows / 2 columns
  // (no bias, no accumulate; quant_mma_swiglu_supported types). A CTA then owns 16 rows of
  // each, so that both sums of a column meet in its epilogue: no fp32 gate and up, no separate
  // SwiGLU kernel.
  HalfRows swiglu;
  const float* bias = nullptr;
  bool accumulate = false;
};

// The weight types the kernel reads: the quantized ones.
bool quant_mma_supported(TensorType type);

// The types with SwiGLU output (QuantMmaArgs::swiglu): those whose gate and up weights can be
// one matrix (blocks that carry their scales, no separate scale array).
bool quant_mma_swiglu_supported(TensorType type);

// Allows the kernels the shared memory of their activation rings; once per device before
// quant_mma (gemm.h's configure_gemm_kernels does it).
Status configure_quant_mma_kernels();

// PRECONDITIONS: as above; w.cols a whole number of units of its type;
// configure_quant_mma_kernels() ran on this device.
Status quant_mma(const QuantMmaArgs& args, LaunchStream stream);

}  // namespace llamaserve::cuda
