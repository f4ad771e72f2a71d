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
  // MatvecArgs::forced_split and forced_group_rows (0: the launcher chooses).
  int32_t forced_split = 0;
  int32_t forced_group_rows = 0;
};

// Warps of a matvec CTA (matvec_kernel.cuh).
inline constexpr int kMatvecWarps = 4;

// Batches of up to this many activation rows may split each row group's columns over 2 or 4
// warps (matvec_kernel.cuh).
inline constexpr int kMaxSplitMatvecRows = 4;

// What the launcher knows of a launch when it sizes its grid: n_groups row groups of n_steps
// steps each, the CTAs one SM keeps resident of the kernel with each split (1, 2, 4; 0 where
// that kernel does not exist, as for batches above kMaxSplitMatvecRows).
struct MatvecShape {
  int64_t n_groups = 0;
  int n_steps = 0;
  bool whole_rows = false;  // no column split is chosen (it may still be forced)
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

// Rows in a group of a float matvec of up to kMaxSplitMatvecRows activation rows: two
// (kMatvecRowsPerWarp) or kWideMatvecRows (choose_matvec_group_rows); the launcher chooses per
// launch unless MatvecArgs::forced_group_rows forces one (the tests run both).
inline constexpr int kWideMatvecUnroll = 2;  // items a lane and row a step (128 bytes a lane)

// The group rows of a float launch of batch_rows activation rows (1 to kMaxSplitMatvecRows),
// from the shape of its groups of two (with their steps and the CTAs per SM of their kernels).
// One row: kWideMatvecRows where whole rows in groups of two keep fewer than 75% of the resident
// warps streaming (a 4096-row matrix on an H200: 2048 of 3168), else 2. Such a launch splits its
// columns over 2 or 4 warps, whose kernels hold 4 CTAs per SM (their named barriers); groups of
// four rows loaded two items a lane at a time keep 4 KB a warp in flight against 3 KB for
// groups of two with three items, and share each activation load among four rows: 4096 x 4096
// F16 11.0 against 12.3 us, 4096 x 11008 23.6 against 26.9, and 7B F16 decode at batch 1 on one
// GPU 252.8 against 232.3 tok/s (bench/results/2026-12-01-h200-matvec-group-rows.md); taller
// matrices keep groups of two, whole, on 6 CTAs per SM. Two to four rows: kWideMatvecRows for
// every shape (each activation load then serves four weight rows; groups of two with three
// items held B x 2 sums and 6 loads in registers and ran at 4-5 CTAs per SM: 11008 x 4096 at 2
// rows 35.2 against 26.3 us, at 4 rows 36.5 against 29.9,
// bench/results/2026-12-01-h200-matvec-batch-groups.md). forced_rows (2 or 4; 0 for none)
// overrides the choice.
int choose_matvec_group_rows(const MatvecShape& two_row_groups, int batch_rows, int forced_rows);

// Items a lane and step in groups of four rows, from the shape of kWideMatvecUnroll items:
// kWideMatvecUnroll up to two activation rows, and for three or four where whole rows keep at
// least 75% of the resident warps streaming (their kernels hold 3 CTAs per SM: tall matrices);
// else one item, whose kernels hold 4 CTAs per SM and split a 4096-row matrix's columns evenly
// (4 rows, 4096 x 4096: 12.9 against 16.3 us).
int choose_wide_matvec_unroll(const MatvecShape& two_item_groups, int batch_rows);

// Whether one-row launches of quantized `type` weights take groups of kWideMatvecRows rows (as
// float launches of up to kMaxSplitMatvecRows rows may), one item a lane and step, with the
// float weights' column split (choose_matvec_grid): Q4_0 and Q4_1, whose groups of two, 20 bytes
// a lane and row a step, leave the memory system short of loads. In the kernel benchmark at one
// row (bench/results/2026-12-01-h200-quant-matvec-groups.md), Q4_0 4096 x 4096 4.71 against
// 6.46 us, 4096 x 11008 10.16 against 14.67 (both split over two warps), 11008 x 4096 9.14
// against 12.43 (whole); Q4_1 alike; 7B Q4_0 decode at batch 1 524 against 444 tok/s.
// MatvecArgs::forced_group_rows = 2 forces groups of two here too.
constexpr bool quant_takes_wide_groups(TensorType type) {
  return type == TensorType::Q4_0 || type == TensorType::Q4_1;
}

// Whether the streaming kernel's groups of `type` weights at batch_rows activation rows are
// kWideMatvecRows rows (kMatvecRowsPerWarp, matvec_kernel.cuh), each activation load then
// serving four weight rows: Q4_K at 1 to 4 rows, with whole rows (at one row 152 registers a
// thread, 3 CTAs an SM instead of 5), and Q4_0 and Q4_1 at 2 to 4 rows (at one row the
// launcher takes them there itself, quant_takes_wide_groups). 7B decode at batch 1 to 4 2-22%
// faster than in groups of two (bench/results/2026-12-04-h200-q4_k-b1-geometry.md,
// 2026-12-04-h200-q4_k-batch-groups.md, 2026-12-04-h200-q4-batch-groups.md); Q6_K at one row and
// Q8_0 at 1 to 4 rows lost, and keep groups of two as Q5_K does.
constexpr bool quant_rows_take_wide_groups(TensorType type, int batch_rows) {
  if (batch_rows > 4) return false;
  return type == TensorType::Q4_K || (quant_takes_wide_groups(type) && batch_rows > 1);
}

// Whether a launch of n_rows activation rows of `type` weights may take groups of
// kWideMatvecRows rows (choose_matvec_group_rows, quant_takes_wide_groups).
bool matvec_may_widen_groups(TensorType type, int n_rows);

// Every unit (split warps) the same number of groups, the last ones one fewer, as many units as
// are resident or fewer. Float weights stay whole while at least 75% of the resident warps
// stream (splitting costs a barrier per group and shortens each warp's stream, which loses where
// the memory system is already busy: an 11008 x 4096 F16 matrix, 64% of the copy bandwidth split
// four ways, 82% whole); below that they take the split that keeps the most warps streaming, by
// at least 2 points, with every warp given at least one step a group (4096 x 11008: 79% split
// four ways, 68% whole). So do Q4_0 and Q4_1 in groups of four rows (above). Other quantized
// launches keep whole rows (shape.whole_rows): their groups are a few steps long, and split,
// their 11008 x 4096 products lost (Q4_0 in groups of two 49% of the copy bandwidth whole, 41%
// split). forced_split (1, 2 or 4; 0 for none) overrides the choice where that kernel exists.
MatvecGrid choose_matvec_grid(const MatvecShape& shape, int forced_split);

// PRECONDITION: the parts passed the checks of matvec_parts() and have type T.
template <TensorType T>
Status launch_matvec(const MatvecLaunch& launch, LaunchStream stream);

}  // namespace llamaserve::cuda
