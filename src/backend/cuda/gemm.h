// Prefill / large-batch products Y = X W^T with cuBLAS tensor-core GEMMs:
//   y[b, r] = (accumulate ? y[b, r] : 0) + Σ_c W[r, c] · x[b, c] + bias[r].
//
// The activations are converted to f16 (bf16 for BF16 weights) and the product accumulates in
// fp32 into the fp32 output. F16/BF16 weights are used in place; quantized (and F32) weights
// are first dequantized to f16, a slice of rows at a time, into a scratch buffer: the cost is
// one extra pass over an f16 copy of the slice, small next to the GEMM once the batch has more
// than a few dozen rows. Quantized weights with fewer rows (GemmArgs::quant_mma_rows) are
// multiplied by quant_mma.h's kernel, which decodes them in registers instead.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "backend/cuda/device_matrix.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/launch.h"
#include "core/status.h"

namespace llamaserve::cuda {

// Products of quantized weights with up to this many activation rows skip the f16 copy of the
// weights and run on quant_mma.h's kernel instead (GemmArgs::quant_mma_rows).
inline constexpr int kDefaultQuantMmaRows = 64;

struct GemmWorkspace {
  void* act_half = nullptr;  // activations as f16/bf16: n_rows * round_up(cols, 8) elements
  size_t act_half_bytes = 0;
  void* weight_half = nullptr;  // dequantized weight rows (unused for F16/BF16 weights)
  size_t weight_half_bytes = 0;
};

struct GemmArgs {
  DeviceMatrix w;            // (rows, cols)
  const float* x = nullptr;  // row b at x + b * x_stride
  int64_t x_stride = 0;
  int64_t n_rows = 0;
  float* y = nullptr;  // y[b * y_stride + r]
  int64_t y_stride = 0;
  // When set, the product goes here instead of y, as halves (bf16 for BF16 weights, else f16;
  // saturating to inf beyond their range), row stride y_stride: a tensor-parallel partial
  // summed in half precision. Not with bias or accumulate.
  void* y_half = nullptr;
  // When set, w's first rows / 2 rows are a gate and the others its up projection, and the
  // product goes on to SwiGLU's rows silu(gate) * up, written here as halves (rows / 2 columns;
  // elementwise.h's silu_mul to_half, bit for bit): on quant_mma.h's kernel in its epilogue
  // where it has that output (quant_mma_swiglu_supported), else through y (required: the fp32
  // gate and up) and silu_mul. Not with y_half, bias or accumulate.
  HalfRows swiglu;
  const float* bias = nullptr;
  bool accumulate = false;
  // The workspace's act_half already holds x converted for this weight type (a previous gemm
  // of the same x and the same half type, or x's producer; row stride gemm_act_half_stride):
  // skip the conversion (x is then not read).
  bool x_half_ready = false;
  // Quantized weights with up to this many rows run on quant_mma.h's kernel, with more through
  // the f16 copy and cuBLAS (0: always cuBLAS). The tests force either path.
  int32_t quant_mma_rows = kDefaultQuantMmaRows;
};

// Bytes of GemmWorkspace::act_half needed for n_rows rows of max_cols features.
size_t gemm_act_half_bytes(int64_t n_rows, int64_t max_cols);

// The row stride (elements) of GemmWorkspace::act_half for inputs of `cols` features: where a
// producer writes the converted input itself (GemmArgs::x_half_ready).
int64_t gemm_act_half_stride(int64_t cols);

// The kernels' settings gemm needs on the current device (quant_mma.h's shared memory); once
// per device before gemm.
Status configure_gemm_kernels();

// PRECONDITIONS: configure_gemm_kernels() ran on this device; the workspace holds the converted
// activations and at least one dequantized weight row (more rows, fewer and larger GEMMs). For CUDA
// graph capture, `handle` must already be bound to `stream` with a workspace set
// (cublasSetWorkspace), so nothing allocates.
Status gemm(cublasHandle_t handle, const GemmArgs& args, const GemmWorkspace& workspace,
            LaunchStream stream);

}  // namespace llamaserve::cuda
