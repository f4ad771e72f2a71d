// Decode-time products of a weight matrix with a few activation rows:
//   y[b, r] = (accumulate ? y[b, r] : 0) + Σ_c W[r, c] · x[b, c] + bias[r],  b < n_rows.
//
// Memory-bound: each weight byte is read once for all activation rows of a launch (up to
// kMaxMatvecRows; more rows run in groups of that many). Weights stream with 16-byte loads,
// activations are fp32 and read through L1, and accumulation is fp32.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "backend/cuda/device_matrix.h"
#include "core/status.h"

namespace llamaserve::cuda {

inline constexpr int kMaxMatvecRows = 8;

struct MatvecArgs {
  DeviceMatrix w;               // (rows, cols)
  const float* x = nullptr;     // row b at x + b * x_stride; 16-byte aligned, x_stride % 4 == 0
  int64_t x_stride = 0;         // >= w.cols
  int32_t n_rows = 1;           // activation rows, >= 1
  float* y = nullptr;           // y[b * y_stride + r]
  int64_t y_stride = 0;         // >= w.rows
  const float* bias = nullptr;  // (rows) or null
  bool accumulate = false;      // add to y (the residual stream) instead of overwriting it
};

// PRECONDITIONS (checked, an error Status otherwise): the contract above; w is a matrix of a
// supported type uploaded by upload_matrix; y does not overlap x.
Status matvec(const MatvecArgs& args, cudaStream_t stream);

// Weight bytes one matvec reads (for bandwidth figures).
uint64_t matvec_weight_bytes(const DeviceMatrix& w);

}  // namespace llamaserve::cuda
