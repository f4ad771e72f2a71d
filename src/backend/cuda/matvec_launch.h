// Per-type matvec launchers, instantiated in one .cu file per type family so that host code
// calls them without nvcc. Internal to the CUDA backend; use matvec.h.
#pragma once

#include <array>

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

// Warps of a matvec CTA (matvec_kernel.cuh).
inline constexpr int kMatvecWarps = 4;

// Batches of up to this many activation rows may split each row group's columns over 2 or 4
// warps (matvec_kernel.cuh).
inline constexpr int kMaxSplitMatvecRows = 4;

// The column split every such launch uses: 0 (the default) lets the launcher pick per launch;
// 1, 2 or 4 forces it. The environment's LLAMASERVE_MATVEC_SPLIT sets the starting value (for
// timing one against another); set_matvec_k_split() overrides it (the tests run every split).
int matvec_k_split();
void set_matvec_k_split(int split);

// What the launcher knows of a launch when it sizes its grid: n_groups row groups of n_steps
// steps each, the CTAs one SM keeps resident of the kernel with each split (1, 2, 4; 0 where
// that kernel does not exist, as for batches above kMaxSplitMatvecRows).
struct MatvecShape {
  int64_t n_groups = 0;
  int n_steps = 0;
  bool quantized = false;
  int sms = 0;
  std::array<int, 3> ctas_per_sm{};
};

// The grid of a launch: its CTAs, the column split its warps use, and the fraction of the
// resident warps that stream.
struct MatvecGrid {
  int64_t ctas = 0;
  int split = 1;
  double busy = 0.0;
};

// Every unit (split warps) the same number of groups, the last ones one fewer, as many units as
// are resident or fewer. Float weights stay whole while at least 75% of the resident warps
// stream (splitting costs a barrier per group and shortens each warp's stream, which loses where
// the memory system is already busy: an 11008 x 4096 F16 matrix, 64% of the copy bandwidth split
// four ways, 82% whole); below that they take the split that keeps the most warps streaming, by
// at least 2 points, with every warp given at least one step a group (4096 x 11008: 79% split
// four ways, 68% whole). Quantized weights keep whole rows: their groups are a few steps long,
// and split, their 11008 x 4096 products lost (Q4_0 49% of the copy bandwidth whole, 41%
// split). forced_split (1, 2 or 4; 0 for none) overrides the choice where that kernel exists.
MatvecGrid choose_matvec_grid(const MatvecShape& shape, int forced_split);

// PRECONDITION: the parts passed the checks of matvec_parts() and have type T.
template <TensorType T>
Status launch_matvec(const MatvecLaunch& launch, cudaStream_t stream);

}  // namespace llamaserve::cuda
