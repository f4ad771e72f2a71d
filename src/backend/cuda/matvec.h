// Decode-time products of weight matrices with a few activation rows:
//   y[b, r] = (accumulate ? y[b, r] : 0) + Σ_c W[r, c] · x[b, c] + bias[r],  b < n_rows.
//
// Memory-bound: each weight byte is read once for all activation rows of a launch (up to
// kMaxMatvecRows; more rows run in groups of that many). Quantized weights (Q8_0, Q4_0, Q4_1,
// Q4_K, Q5_K, Q6_K) take the activations as 8-bit blocks (act_quant.h) and multiply with
// integer dot products; F32/F16/BF16 weights take fp32 activations. Accumulation is fp32.
//
// Several matrices with the same input (Q, K and V; gate and up) can run in one launch, which
// saves the launch gaps and the tail of each small grid.
#pragma once

#include <cstdint>
#include <span>

#include <cuda_runtime_api.h>

#include "backend/cuda/act_quant.h"
#include "backend/cuda/device_matrix.h"
#include "backend/cuda/launch.h"
#include "backend/cuda/peer_all_reduce.h"
#include "core/status.h"

namespace llamaserve::cuda {

inline constexpr int kMaxMatvecRows = 8;
inline constexpr int kMaxMatvecParts = 3;
// Rows in the taller of the two row groups of float launches (matvec_launch.h).
inline constexpr int kWideMatvecRows = 4;

// True when matvec takes `type` weights with 8-bit activations (MatvecArgs::xq).
bool matvec_uses_q8(TensorType type);

struct MatvecArgs {
  DeviceMatrix w;  // (rows, cols)
  // Float weight types: row b at x + b * x_stride; 16-byte aligned, x_stride % 4 == 0.
  const float* x = nullptr;
  int64_t x_stride = 0;  // >= w.cols
  // Quantized weight types: the same rows as 8-bit blocks (quantize_q8 of x).
  Q8Rows xq;
  int32_t n_rows = 1;           // activation rows, >= 1
  float* y = nullptr;           // y[b * y_stride + r]
  int64_t y_stride = 0;         // >= w.rows
  const float* bias = nullptr;  // (rows) or null
  bool accumulate = false;      // add to y (the residual stream) instead of overwriting it
  // When set (active), the product is this rank's partial of a fused tensor-parallel
  // reduction (peer_all_reduce.h): row b's outputs go to every rank's inbox at [b * w.rows + r]
  // instead of y, and the launch publishes them. PRECONDITIONS then: one part, no bias, no
  // accumulate, n_rows <= kMaxMatvecRows, n_rows * w.rows <= reduce->capacity.
  const PeerReduceView* reduce = nullptr;
  // Variants the launcher otherwise chooses per launch, forced (for the tests and the kernel
  // benchmark; 0 leaves the choice to the launcher): the column split of launches of up to
  // kMaxSplitMatvecRows activation rows (1, 2 or 4 warps a row group), and the rows of a group
  // where a launch may widen its groups (2 or kWideMatvecRows; matvec_launch.h). Every part of
  // a launch has the same.
  int32_t forced_split = 0;
  int32_t forced_group_rows = 0;
};

// PRECONDITIONS (checked, an error Status otherwise): the contract above; w is a matrix of a
// supported type uploaded by upload_matrix; y does not overlap x.
Status matvec(const MatvecArgs& args, LaunchStream stream);

// Several products in one launch. PRECONDITIONS: as matvec for each; all parts have the same
// weight type, columns, activations (x / xq) and n_rows; at most kMaxMatvecParts parts.
Status matvec_parts(std::span<const MatvecArgs> parts, LaunchStream stream);

// Weight bytes one matvec reads (for bandwidth figures).
uint64_t matvec_weight_bytes(const DeviceMatrix& w);

}  // namespace llamaserve::cuda
