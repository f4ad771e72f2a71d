// RMSNorm: y = x / sqrt(mean(x²) + eps) * weight, per row, fp32.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "backend/cuda/act_quant.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/launch.h"
#include "backend/cuda/peer_all_reduce.h"
#include "core/status.h"

namespace llamaserve::cuda {

struct RmsNormArgs {
  const float* x = nullptr;  // row r at x + r * x_stride (or row row_ids[r] when given)
  int64_t x_stride = 0;
  // When set (device array), output row r normalizes input row row_ids[r]: the final norm
  // runs only on the rows whose logits are wanted.
  const int32_t* row_ids = nullptr;
  // When set, residual rows are added first: x[r] += residual[r], and the sum is both kept in
  // x and normalized (saves a pass over the hidden state). Not combinable with row_ids.
  const float* residual = nullptr;
  int64_t residual_stride = 0;
  // The same with residual rows of halves (a tensor-parallel sum of half partials, bf16 when
  // half_residual_bf16), at half_residual + r * residual_stride. Not combinable with residual.
  const void* half_residual = nullptr;
  bool half_residual_bf16 = false;
  // When active, the consumer of a fused tensor-parallel reduction (peer_all_reduce.h): waits
  // for the peers, then x[r] += the sum of the ranks' partials of row r (at [r * n + c]), kept
  // in x and normalized. Not combinable with row_ids or residual; n_rows * n <= its capacity.
  PeerReduceView reduce;
  // When >= 0, the consumer of a pulled sum (peer_all_reduce.h) of slot pull_slot of `reduce`
  // instead: waits for every peer's signal, then x[r] += the sum of the ranks' partials of row r
  // (at [r * residual_stride + c]), kept in x and normalized. Not combinable with row_ids or
  // the residuals.
  int32_t pull_slot = -1;
  const float* weight = nullptr;  // (n)
  float* y = nullptr;             // may alias x only when residual is null
  int64_t y_stride = 0;
  // When set, y's rows are written as halves there instead (a GEMM's input; y may then be
  // null). Not with yq.
  HalfRows y_half;
  // When set (yq.qs not null), y's rows are also written as 8-bit blocks (act_quant.h), the
  // input of the integer matvec. PRECONDITION then: n % 32 == 0.
  Q8Rows yq;
  int64_t n_rows = 0;
  int64_t n = 0;
  float eps = 1e-5f;
};

Status rmsnorm(const RmsNormArgs& args, LaunchStream stream);

}  // namespace llamaserve::cuda
