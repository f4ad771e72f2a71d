// Per-type matvec launchers, instantiated in one .cu file per type family so that host code
// calls them without nvcc. Internal to the CUDA backend; use matvec.h.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/cuda/matvec.h"

namespace llamaserve::cuda {

// One matrix of a launch. Its groups of rows (RW consecutive rows each) are the launch's groups
// [first_group, next part's first_group).
struct MatvecPart {
  DeviceMatrix w;
  float* y = nullptr;
  int64_t y_stride = 0;
  const float* bias = nullptr;
  int64_t first_group = 0;
};

// The kernel parameter: up to kMaxMatvecParts matrices of one type and width sharing the
// activations.
struct MatvecLaunch {
  MatvecPart parts[kMaxMatvecParts];
  int32_t n_parts = 0;
  const float* x = nullptr;
  int64_t x_stride = 0;
  Q8Rows xq;
  int32_t n_rows = 0;
  bool accumulate = false;
  PeerReduceView reduce;  // a fused reduction's partial (MatvecArgs::reduce), when active
  int64_t n_groups = 0;   // row groups of all parts (set by the launcher)
};

// Batches of up to this many activation rows may split each row group's columns over 2 or 4
// warps (matvec_kernel.cuh).
inline constexpr int kMaxSplitMatvecRows = 4;

// The column split every such launch uses: 0 (the default) lets the launcher pick per launch;
// 1, 2 or 4 forces it. The environment's LLAMASERVE_MATVEC_SPLIT sets the starting value (for
// timing one against another); set_matvec_k_split() overrides it (the tests run every split).
int matvec_k_split();
void set_matvec_k_split(int split);

// PRECONDITION: the parts passed the checks of matvec_parts() and have type T.
template <TensorType T>
Status launch_matvec(const MatvecLaunch& launch, cudaStream_t stream);

}  // namespace llamaserve::cuda
