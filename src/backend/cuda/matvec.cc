#include "backend/cuda/matvec.h"

#include <algorithm>

#include "backend/cuda/check.h"
#include "backend/cuda/matvec_launch.h"

namespace llamaserve::cuda {

bool matvec_uses_q8(TensorType type) {
  switch (type) {
    case TensorType::Q8_0:
    case TensorType::Q4_0:
    case TensorType::Q4_1:
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K: return true;
    default: return false;
  }
}

namespace {

bool is_split(int split) { return split == 1 || split == 2 || split == 4; }

bool is_group_rows(int rows) { return rows == 2 || rows == kWideMatvecRows; }

constexpr double kBusyEnough = 0.75;

MatvecGrid grid_with_split(const MatvecShape& shape, int index) {
  const int split = 1 << index;
  const int64_t units_per_cta = kMatvecWarps / split;
  const int64_t resident = static_cast<int64_t>(std::max(shape.sms, 1)) *
                           std::max(shape.ctas_per_sm[static_cast<size_t>(index)], 1) *
                           units_per_cta;
  const int64_t per_unit = (shape.n_groups + resident - 1) / resident;
  const int64_t units = (shape.n_groups + per_unit - 1) / per_unit;
  return {(units + units_per_cta - 1) / units_per_cta, split,
          static_cast<double>(units) / static_cast<double>(resident)};
}

}  // namespace

bool matvec_may_widen_groups(TensorType type, int n_rows) {
  if (matvec_uses_q8(type)) return n_rows == 1 && quant_takes_wide_groups(type);
  return n_rows <= kMaxSplitMatvecRows;
}

int choose_matvec_group_rows(const MatvecShape& two_row_groups, int batch_rows, int forced_rows) {
  if (is_group_rows(forced_rows)) return forced_rows;
  if (batch_rows > 1) return kWideMatvecRows;
  return grid_with_split(two_row_groups, 0).busy < kBusyEnough ? kWideMatvecRows : 2;
}

int choose_wide_matvec_unroll(const MatvecShape& two_item_groups, int batch_rows) {
  if (batch_rows <= 2) return kWideMatvecUnroll;
  return grid_with_split(two_item_groups, 0).busy >= kBusyEnough ? kWideMatvecUnroll : 1;
}

MatvecGrid choose_matvec_grid(const MatvecShape& shape, int forced_split) {
  constexpr double kClearGain = 0.02;
  MatvecGrid grid = grid_with_split(shape, 0);
  const bool choose = forced_split == 0 && !shape.whole_rows && grid.busy < kBusyEnough;
  for (int i = 1; i < 3; ++i) {
    if (shape.ctas_per_sm[static_cast<size_t>(i)] <= 0) continue;
    const MatvecGrid g = grid_with_split(shape, i);
    if (forced_split == g.split ||
        (choose && g.split <= shape.n_steps && g.busy > grid.busy + kClearGain)) {
      grid = g;
    }
  }
  return grid;
}

uint64_t matvec_weight_bytes(const DeviceMatrix& w) {
  return static_cast<uint64_t>(w.rows) *
         static_cast<uint64_t>(w.quant_row_bytes + w.scale_row_bytes);
}

Status matvec(const MatvecArgs& a, LaunchStream stream) {
  return matvec_parts(std::span<const MatvecArgs>(&a, 1), stream);
}

Status matvec_parts(std::span<const MatvecArgs> parts, LaunchStream stream) {
  LS_CUDA_REQUIRE(!parts.empty() && parts.size() <= static_cast<size_t>(kMaxMatvecParts));
  const MatvecArgs& first = parts[0];
  const bool q8 = matvec_uses_q8(first.w.type);
  MatvecLaunch launch;
  launch.n_parts = static_cast<int32_t>(parts.size());
  launch.n_rows = first.n_rows;
  launch.accumulate = first.accumulate;
  LS_CUDA_REQUIRE(first.forced_split == 0 || is_split(first.forced_split));
  LS_CUDA_REQUIRE(first.forced_group_rows == 0 || is_group_rows(first.forced_group_rows));
  launch.forced_split = first.forced_split;
  launch.forced_group_rows = first.forced_group_rows;
  if (q8) {
    launch.xq = first.xq;
  } else {
    launch.x = first.x;
    launch.x_stride = first.x_stride;
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    const MatvecArgs& a = parts[i];
    LS_CUDA_REQUIRE(a.w.quants != nullptr && a.w.rows > 0 && a.w.cols > 0);
    LS_CUDA_REQUIRE(a.w.type == first.w.type && a.w.cols == first.w.cols);
    LS_CUDA_REQUIRE(a.n_rows == first.n_rows && a.n_rows >= 1 && a.accumulate == first.accumulate);
    LS_CUDA_REQUIRE(a.forced_split == first.forced_split &&
                    a.forced_group_rows == first.forced_group_rows);
    LS_CUDA_REQUIRE(a.y != nullptr && (a.n_rows == 1 || a.y_stride >= a.w.rows));
    if (q8) {
      LS_CUDA_REQUIRE(a.xq.qs == first.xq.qs && a.xq.ds == first.xq.ds);
      LS_CUDA_REQUIRE(a.xq.qs != nullptr && a.xq.ds != nullptr);
      LS_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(a.xq.qs) % 16 == 0 && a.xq.qs_stride % 16 == 0);
      LS_CUDA_REQUIRE(a.n_rows == 1 ||
                      (a.xq.qs_stride >= a.w.cols && a.xq.ds_stride >= a.w.cols / kQ8Block));
    } else {
      LS_CUDA_REQUIRE(a.x == first.x && a.x_stride == first.x_stride && a.x != nullptr);
      LS_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && a.x_stride % 4 == 0);
      LS_CUDA_REQUIRE(a.n_rows == 1 || a.x_stride >= a.w.cols);
    }
    launch.parts[i].w = a.w;
    launch.parts[i].y = a.y;
    launch.parts[i].y_stride = a.y_stride;
    launch.parts[i].bias = a.bias;
  }
  if (first.reduce != nullptr && first.reduce->active()) {
    LS_CUDA_REQUIRE(parts.size() == 1 && first.bias == nullptr && !first.accumulate);
    LS_CUDA_REQUIRE(first.n_rows <= kMaxMatvecRows &&
                    first.n_rows * first.w.rows <= first.reduce->capacity);
    launch.reduce = *first.reduce;
  }
  switch (first.w.type) {
    case TensorType::F32: return launch_matvec<TensorType::F32>(launch, stream);
    case TensorType::F16: return launch_matvec<TensorType::F16>(launch, stream);
    case TensorType::BF16: return launch_matvec<TensorType::BF16>(launch, stream);
    case TensorType::Q8_0: return launch_matvec<TensorType::Q8_0>(launch, stream);
    case TensorType::Q4_0: return launch_matvec<TensorType::Q4_0>(launch, stream);
    case TensorType::Q4_1: return launch_matvec<TensorType::Q4_1>(launch, stream);
    case TensorType::Q4_K: return launch_matvec<TensorType::Q4_K>(launch, stream);
    case TensorType::Q5_K: return launch_matvec<TensorType::Q5_K>(launch, stream);
    case TensorType::Q6_K: return launch_matvec<TensorType::Q6_K>(launch, stream);
    default: return unsupported_weight_type(first.w.type, "matvec");
  }
}

}  // namespace llamaserve::cuda
