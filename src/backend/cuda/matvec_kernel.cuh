// The matvec kernel template (see matvec.h for the contract). Included only by the
// matvec_*.cu files, each of which instantiates it for its weight types.
//
// Geometry: a warp computes groups of RW consecutive weight rows of one part. It walks a group's
// items (dot_formats.cuh) in steps, its lanes in lock step: lane l takes items l, l + 32, ...,
// U items per step, so a warp's loads of one row are contiguous, and each activation item is
// loaded once per step and used for all RW rows (keeping L1 traffic for the activations below
// that of the weight stream). Partial sums (RW × B per lane) are reduced across the warp by a
// transposing butterfly: 31 shuffles for 32 sums instead of 160.
//
// Split K: S warps of a CTA (S = 1, 2 or 4; a "unit") can share each group, warp j of the unit
// taking steps j, j + S, ...; at the group's end their sums meet in shared memory (a named
// barrier per unit) and the unit's first warp adds them in a fixed order and stores the outputs.
// The launcher splits only float-weight launches (and Q4_0/Q4_1 ones in groups of four) that leave
// many resident warps idle (choose_matvec_grid, matvec_launch.h): a 4096-row matrix has 2048
// groups of two rows, which keep only 2048 of the 3168 warps an H200 holds busy with S = 1, and
// 2732 with S = 4. Float launches of up to 4 activation rows may take groups of four rows instead
// of two (choose_matvec_group_rows, choose_wide_matvec_unroll), as Q4_0 and Q4_1 launches of one
// row do (quant_takes_wide_groups).
//
// Streaming: the warps are persistent. The grid holds at most as many warps as the GPU keeps
// resident, each unit taking groups u, u + N, u + 2N, ... with every unit given the same number
// of groups (up to one), so no second, partly filled wave of CTAs leaves the memory system idle at
// the end. A warp issues the loads of its next step (within the group or of its next group)
// before it computes the current one, so its loads stay in flight while it computes.
//
// Launched with programmatic dependent launch: the first step's weight loads are issued before
// the wait for the kernel that produced the activations (launch.cuh).
//
// No CTA-wide barrier (only the units' own, when S > 1): units without a group simply return. The
// parameter is __grid_constant__ so that picking a part by index reads it in place instead of
// copying the whole struct to local memory. As a fused reduction's producer (MatvecLaunch::reduce)
// each output goes to every rank's inbox as one tagged word (peer_reduce.cuh): still no barrier.
#pragma once

#include <algorithm>
#include <array>

#include "backend/cuda/check.h"
#include "backend/cuda/dot_formats.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/matvec_launch.h"
#include "backend/cuda/peer_reduce.cuh"

namespace llamaserve::cuda {

inline constexpr int kMatvecThreads = 32 * kMatvecWarps;

// Weight rows per warp: more rows share each activation load (B of them per item); fewer keep
// the RW × B sums and the decoded items in registers (the K-quants' decoded items are 80 bytes:
// four rows of them with eight activation rows would take every register).
// Quantized weights: two rows, or four where quant_rows_take_wide_groups (matvec_launch.h).
template <TensorType T, int B>
inline constexpr int kMatvecRowsPerWarp = quant_rows_take_wide_groups(T, B) ||
                                                  (B > 4 &&
                                                   sizeof(typename DotFormat<T>::Decoded) <= 48)
                                              ? kWideMatvecRows
                                              : 2;

// Items per lane and step: about 96 bytes of loaded registers (RW rows × U items) per lane and
// buffer; a warp holds two buffers (the step it computes and the next one in flight).
template <TensorType T, int RW>
inline constexpr int kMatvecUnroll =
    std::max<int>(1, 96 / (RW * static_cast<int>(sizeof(typename DotFormat<T>::Raw))));

// Items per lane and step of a launch of B activation rows in groups of RW: kMatvecUnroll, but
// two for Q8_0 at one row (144 bytes a lane in flight instead of 72, at 4 CTAs per SM instead of
// 8: 11008 x 4096 16.8 against 20.7 us, 7B Q8_0 decode at batch 1 363 against 301 tok/s,
// bench/results/2026-12-01-h200-matvec-q8-steps.md).
template <TensorType T, int B, int RW>
inline constexpr int kMatvecStepItems = (T == TensorType::Q8_0 && B == 1) ? 2
                                                                          : kMatvecUnroll<T, RW>;

__host__ __device__ constexpr int next_pow2_int(int n) {
  return n <= 1 ? 1 : 2 * next_pow2_int((n + 1) / 2);
}

// Sums P values across the warp (P a power of two <= 32); lane L returns the total of value
// L >> (5 - log2 P). Each halving step trades half of the values with the partner lane, so
// every lane ends with one value summed over the lanes that differ in the traded bits; the
// remaining low lane bits are summed with plain shuffles.
template <int P>
__device__ __forceinline__ float warp_transpose_sum(float (&v)[P], int lane) {
  int offset = 16;
#pragma unroll
  for (int n = P; n > 1; n /= 2, offset /= 2) {
    const bool upper = (lane & offset) != 0;
#pragma unroll
    for (int i = 0; i < n / 2; ++i) {
      const float send = upper ? v[i] : v[i + n / 2];
      const float keep = upper ? v[i + n / 2] : v[i];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, send, offset);
    }
  }
  float s = v[0];
#pragma unroll
  for (; offset > 0; offset /= 2) s += __shfl_xor_sync(0xffffffffu, s, offset);
  return s;
}

template <TensorType T>
__device__ __forceinline__ auto activation_row(const MatvecLaunch& a, int b) {
  if constexpr (DotFormat<T>::kQ8) {
    return q8_row(a.xq, b);
  } else {
    return a.x + b * a.x_stride;
  }
}

// Adds item `item` of the group's RW rows (raw, as loaded) times each activation row to acc.
template <TensorType T, int B, int RW>
__device__ __forceinline__ void accumulate_item(const MatvecLaunch& a,
                                                const typename DotFormat<T>::Raw (&raw)[RW],
                                                int item, float (&acc)[RW][B]) {
  using F = DotFormat<T>;
  typename F::Decoded dec[RW];
#pragma unroll
  for (int r = 0; r < RW; ++r) dec[r] = F::decode(raw[r], item);
#pragma unroll
  for (int b = 0; b < B; ++b) {
    const typename F::Act x = F::load_act(activation_row<T>(a, b), item);
#pragma unroll
    for (int r = 0; r < RW; ++r) acc[r][b] += F::dot(dec[r], x);
  }
}

// The warp's sums of its RW x B values: lane L gets value L / (32 / kPadded) (see
// warp_transpose_sum), for kPadded the next power of two of RW x B.
template <int B, int RW>
__device__ __forceinline__ float warp_group_sum(const float (&acc)[RW][B], int lane) {
  constexpr int kValues = RW * B;
  constexpr int kPadded = next_pow2_int(kValues);
  float v[kPadded];
#pragma unroll
  for (int i = 0; i < kPadded; ++i) v[i] = i < kValues ? acc[i / B][i % B] : 0.0f;
  return warp_transpose_sum<kPadded>(v, lane);
}

// Where a warp is: a group of rows (its part and first row) and a step of the items.
struct MatvecCursor {
  int64_t group;
  int part;
  int64_t row0;
  int step;
};

__device__ __forceinline__ void locate_group(const MatvecLaunch& a, int rows_per_group,
                                             MatvecCursor& c) {
  int p = 0;
#pragma unroll
  for (int i = 1; i < kMaxMatvecParts; ++i) {
    if (i < a.n_parts && c.group >= a.parts[i].first_group) p = i;
  }
  c.part = p;
  c.row0 = (c.group - a.parts[p].first_group) * rows_per_group;
}

// Output value i = r * B + b of the group at `c`: plus the bias, into y (or added to it), or
// into every rank's inbox as a fused reduction's partial.
template <int B>
__device__ __forceinline__ void store_matvec_output(const MatvecLaunch& a, const MatvecCursor& c,
                                                    uint32_t reduce_epoch, int i, float out) {
  const int r = i / B, b = i % B;
  const MatvecPart& part = a.parts[c.part];
  const int64_t row = c.row0 + r;
  if (row >= part.w.rows) return;
  if (part.bias != nullptr) out += part.bias[row];
  if (peer_reduce_active(a.reduce)) {
    peer_reduce_store(a.reduce, reduce_epoch, b * part.w.rows + row, out);
  } else {
    float* y = part.y + b * part.y_stride + row;
    *y = a.accumulate ? *y + out : out;
  }
}

template <TensorType T, int B, int RW, int U, int S>
__global__ void __launch_bounds__(kMatvecThreads)
    matvec_kernel(const __grid_constant__ MatvecLaunch a) {
  static_assert(kMatvecWarps % S == 0);
  using F = DotFormat<T>;
  using Raw = typename F::Raw;
  constexpr int kUnitsPerCta = kMatvecWarps / S;
  constexpr int kValues = RW * B;
  constexpr int kPadded = next_pow2_int(kValues);
  static_assert(kPadded <= 32);
  constexpr int kLanesPerValue = 32 / kPadded;
  // The split warps' sums of a group, two groups' worth (a unit's warps may be one group apart).
  __shared__ float partials[S > 1 ? kMatvecWarps : 1][2][kPadded];
  pdl_launch_dependents();
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int unit = warp / S;
  const int slice = warp % S;
  const int64_t n_units = static_cast<int64_t>(gridDim.x) * kUnitsPerCta;
  MatvecCursor cur{static_cast<int64_t>(blockIdx.x) * kUnitsPerCta + unit, 0, 0, slice};
  if (cur.group >= a.n_groups) {
    pdl_wait();  // (nothing to touch; kept so that every thread waits, see launch.cuh)
    return;
  }
  locate_group(a, RW, cur);
  // Every part has the same columns (checked by the launcher).
  const int n_items = static_cast<int>(a.parts[0].w.cols / F::kItemElems);
  const int n_steps = (n_items + 32 * U - 1) / (32 * U);

  // Quantized weights: the group's rows as one-row views, taken when a warp reaches the group,
  // so that a step's loads add only their item's offset to each row's start instead of
  // multiplying out the row and reading the part's matrix again at every step (7B decode at one
  // sequence on an H100: Q4_K_M 446-450 against 438-439 tok/s, Q8_0 310 against 308). Float
  // weights recompute the start at each load: the views' registers cost them more (F16 184
  // against 197 tok/s; bench/results/2026-12-05-h100-matvec-row-views.md). The last group's
  // missing rows repeat its last row (a group at the end of a part may have fewer than RW rows;
  // their results are dropped).
  constexpr bool kRowViews = F::kQ8;
  auto view_rows = [&](const MatvecCursor& c, DeviceMatrix(&rows)[RW]) {
    if constexpr (kRowViews) {
      const DeviceMatrix& w = a.parts[c.part].w;
#pragma unroll
      for (int r = 0; r < RW; ++r) rows[r] = row_view(w, min(c.row0 + r, w.rows - 1));
    }
  };
  // The loads of step c.step of group c (rows: its views). A step past the last (a slice of a
  // matrix with fewer steps than S) loads nothing.
  auto load_step = [&](const MatvecCursor& c, const DeviceMatrix(&rows)[RW], Raw(&raw)[U][RW]) {
    const DeviceMatrix& w = a.parts[c.part].w;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int item = (c.step * U + u) * 32 + lane;
      if (item < n_items) {
#pragma unroll
        for (int r = 0; r < RW; ++r) {
          if constexpr (kRowViews) {
            raw[u][r] = F::load(rows[r], 0, item);
          } else {
            raw[u][r] = F::load(w, min(c.row0 + r, w.rows - 1), item);
          }
        }
      }
    }
  };

  float acc[RW][B];
#pragma unroll
  for (int r = 0; r < RW; ++r) {
#pragma unroll
    for (int b = 0; b < B; ++b) acc[r][b] = 0.0f;
  }
  DeviceMatrix rows[RW];
  view_rows(cur, rows);
  Raw raw[U][RW];
  // The weights are constant, so the first step's loads go out before the wait for the kernel
  // that writes the activations (programmatic dependent launch, launch.cuh).
  load_step(cur, rows, raw);
  pdl_wait();
  const uint32_t reduce_epoch = peer_reduce_active(a.reduce) ? peer_reduce_epoch(a.reduce) : 0;
  auto store = [&](const MatvecCursor& c, int i, float out) {
    store_matvec_output<B>(a, c, reduce_epoch, i, out);
  };
  int parity = 0;
  while (true) {
    MatvecCursor next = cur;
    next.step += S;
    if (next.step >= n_steps) {
      next.step = slice;
      next.group += n_units;
    }
    const bool has_next = next.group < a.n_groups;
    Raw next_raw[U][RW];
    if (has_next) {
      if (next.group != cur.group) {
        locate_group(a, RW, next);
        view_rows(next, rows);  // (the current step's loads are out: its views are done with)
      }
      load_step(next, rows, next_raw);
    }

#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int item = (cur.step * U + u) * 32 + lane;
      if (item < n_items) accumulate_item<T, B, RW>(a, raw[u], item, acc);
    }

    if (cur.step + S >= n_steps) {
      const float sum = warp_group_sum<B, RW>(acc, lane);
      const int index = lane / kLanesPerValue;
      const bool holds_value = lane % kLanesPerValue == 0 && index < kValues;
      if constexpr (S == 1) {
        if (holds_value) store(cur, index, sum);
      } else {
        if (holds_value) partials[warp][parity][index] = sum;
        asm volatile("bar.sync %0, %1;" ::"r"(1 + unit), "r"(32 * S) : "memory");
        if (slice == 0 && lane < kValues) {
          float out = 0.0f;
#pragma unroll
          for (int j = 0; j < S; ++j) out += partials[unit * S + j][parity][lane];
          store(cur, lane, out);
        }
        parity ^= 1;
      }
#pragma unroll
      for (int r = 0; r < RW; ++r) {
#pragma unroll
        for (int b = 0; b < B; ++b) acc[r][b] = 0.0f;
      }
    }
    if (!has_next) break;
    cur = next;
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int r = 0; r < RW; ++r) raw[u][r] = next_raw[u][r];
    }
  }
}

// Short rows (the output and down projections of a tensor-parallel shard, whose columns are a
// fraction of the hidden size): a warp takes one group and holds all of its weights in
// registers, kShortRowItems items a lane and row, loaded before the wait for the kernel that
// writes the activations, so that the whole matrix is in flight while that kernel still runs;
// after the wait only the activations, the dots and the warp's sums remain. Launched where every
// group gets a warp of its own (launch_matvec_rows), for float weights and up to
// kMaxShortRowBatch activation rows. A lane sums its items in the same order as matvec_kernel
// without a column split, so the outputs are the same.
inline constexpr int kShortRowItems = 8;
inline constexpr int kMaxShortRowBatch = 4;
inline constexpr int kShortRowCtasPerSm = 4;  // 128 registers a thread: 2112 warps on an H200

template <TensorType T, int B, int RW>
__global__ void __launch_bounds__(kMatvecThreads, kShortRowCtasPerSm)
    matvec_short_rows_kernel(const __grid_constant__ MatvecLaunch a) {
  using F = DotFormat<T>;
  using Raw = typename F::Raw;
  constexpr int kValues = RW * B;
  constexpr int kPadded = next_pow2_int(kValues);
  constexpr int kLanesPerValue = 32 / kPadded;
  pdl_launch_dependents();
  const int lane = threadIdx.x & 31;
  MatvecCursor cur{static_cast<int64_t>(blockIdx.x) * kMatvecWarps + (threadIdx.x >> 5), 0, 0, 0};
  if (cur.group >= a.n_groups) {
    pdl_wait();  // (nothing to touch; kept so that every thread waits, see launch.cuh)
    return;
  }
  locate_group(a, RW, cur);
  const DeviceMatrix& w = a.parts[cur.part].w;
  const int n_items = static_cast<int>(w.cols / F::kItemElems);
  Raw raw[kShortRowItems][RW];
#pragma unroll
  for (int u = 0; u < kShortRowItems; ++u) {
    const int item = u * 32 + lane;
    if (item < n_items) {
#pragma unroll
      for (int r = 0; r < RW; ++r) raw[u][r] = F::load(w, min(cur.row0 + r, w.rows - 1), item);
    }
  }
  pdl_wait();
  const uint32_t reduce_epoch = peer_reduce_active(a.reduce) ? peer_reduce_epoch(a.reduce) : 0;
  float acc[RW][B];
#pragma unroll
  for (int r = 0; r < RW; ++r) {
#pragma unroll
    for (int b = 0; b < B; ++b) acc[r][b] = 0.0f;
  }
#pragma unroll
  for (int u = 0; u < kShortRowItems; ++u) {
    const int item = u * 32 + lane;
    if (item < n_items) accumulate_item<T, B, RW>(a, raw[u], item, acc);
  }
  const float sum = warp_group_sum<B, RW>(acc, lane);
  const int index = lane / kLanesPerValue;
  if (lane % kLanesPerValue == 0 && index < kValues) {
    store_matvec_output<B>(a, cur, reduce_epoch, index, sum);
  }
}

// CTAs of `kernel` one SM keeps resident (at least 1).
template <class Kernel>
int ctas_per_sm(Kernel kernel) {
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kMatvecThreads, 0) != cudaSuccess) {
    n = 1;
  }
  return std::max(n, 1);
}

// The launch's row groups of RW rows (n_groups and each part's first group set).
template <int RW>
MatvecLaunch with_groups_of(const MatvecLaunch& a) {
  MatvecLaunch launch = a;
  launch.n_groups = 0;
  for (int i = 0; i < a.n_parts; ++i) {
    launch.parts[i].first_group = launch.n_groups;
    launch.n_groups += (a.parts[i].w.rows + RW - 1) / RW;
  }
  return launch;
}

// The streaming kernel of RW-row groups and U items a step, with the column split S (1, 2, 4).
template <TensorType T, int B, int RW, int U>
auto matvec_kernel_with_split(int split) {
  if constexpr (B <= kMaxSplitMatvecRows) {
    if (split == 2) return matvec_kernel<T, B, RW, U, 2>;
    if (split == 4) return matvec_kernel<T, B, RW, U, 4>;
  }
  return matvec_kernel<T, B, RW, U, 1>;
}

// What the grid choice needs of `launch` (groups of RW rows) and the streaming kernels of RW
// and U. Occupancy depends on the kernel and the architecture only (the machines here have one
// kind of GPU), so it is asked once per kernel; the SM count once per device.
template <TensorType T, int B, int RW, int U>
MatvecShape matvec_shape(const MatvecLaunch& launch) {
  constexpr int kSplits = B <= kMaxSplitMatvecRows ? 3 : 1;
  static const auto kCtasPerSm = [] {
    std::array<int, 3> n{};
    for (int i = 0; i < kSplits; ++i)
      n[i] = ctas_per_sm(matvec_kernel_with_split<T, B, RW, U>(1 << i));
    return n;
  }();
  MatvecShape shape;
  shape.n_groups = launch.n_groups;
  shape.n_steps =
      static_cast<int>((launch.parts[0].w.cols / DotFormat<T>::kItemElems + 32 * U - 1) / (32 * U));
  // Q4_0 and Q4_1 in groups of four take the float weights' column split (matvec_launch.h).
  shape.whole_rows = DotFormat<T>::kQ8 && !(RW == kWideMatvecRows && quant_takes_wide_groups(T));
  shape.sms = current_device_sm_count();
  shape.ctas_per_sm = kCtasPerSm;
  return shape;
}

template <TensorType T, int B, int RW, int U>
Status launch_matvec_grid(const MatvecLaunch& launch, const MatvecShape& shape,
                          LaunchStream stream) {
  const MatvecGrid grid = choose_matvec_grid(shape, launch.forced_split);
  LS_CUDA_REQUIRE(grid.ctas <= 0x7fffffff);
  LS_CUDA_CHECK(launch_kernel(matvec_kernel_with_split<T, B, RW, U>(grid.split),
                              static_cast<unsigned>(grid.ctas), kMatvecThreads, 0, stream, launch));
  return Status::ok();
}

template <TensorType T, int B>
Status launch_matvec_rows(const MatvecLaunch& a, LaunchStream stream) {
  constexpr int kRows = kMatvecRowsPerWarp<T, B>;
  constexpr int kUnroll = kMatvecStepItems<T, B, kRows>;
  const MatvecLaunch launch = with_groups_of<kRows>(a);
  // Rows of at most kShortRowItems items a lane, one group a warp: the short-rows kernel (unless
  // a column split is forced: MatvecArgs::forced_split, as the tests do).
  if constexpr (!DotFormat<T>::kQ8 && B <= kMaxShortRowBatch) {
    const auto short_kernel = matvec_short_rows_kernel<T, B, kRows>;
    static const int kShortCtasPerSm = ctas_per_sm(short_kernel);
    const int64_t n_items = a.parts[0].w.cols / DotFormat<T>::kItemElems;
    const int64_t ctas = (launch.n_groups + kMatvecWarps - 1) / kMatvecWarps;
    if (a.forced_split == 0 && n_items <= 32 * kShortRowItems &&
        ctas <= static_cast<int64_t>(current_device_sm_count()) * kShortCtasPerSm) {
      LS_CUDA_CHECK(launch_kernel(short_kernel, static_cast<unsigned>(ctas), kMatvecThreads, 0,
                                  stream, launch));
      return Status::ok();
    }
  }
  // Q4_0 and Q4_1 at one activation row: groups of four rows, one item a step, unless groups of
  // two are forced (quant_takes_wide_groups).
  if constexpr (DotFormat<T>::kQ8 && B == 1 && quant_takes_wide_groups(T)) {
    if (a.forced_group_rows != 2) {
      const MatvecLaunch wide = with_groups_of<kWideMatvecRows>(a);
      return launch_matvec_grid<T, B, kWideMatvecRows, 1>(
          wide, matvec_shape<T, B, kWideMatvecRows, 1>(wide), stream);
    }
  }
  const MatvecShape shape = matvec_shape<T, B, kRows, kUnroll>(launch);
  // Float weights, up to kMaxSplitMatvecRows activation rows: groups of four rows where the
  // launcher prefers them (choose_matvec_group_rows), two items a step or one
  // (choose_wide_matvec_unroll).
  if constexpr (!DotFormat<T>::kQ8 && B <= kMaxSplitMatvecRows) {
    if (choose_matvec_group_rows(shape, B, a.forced_group_rows) == kWideMatvecRows) {
      const MatvecLaunch wide = with_groups_of<kWideMatvecRows>(a);
      const MatvecShape two_items = matvec_shape<T, B, kWideMatvecRows, kWideMatvecUnroll>(wide);
      if constexpr (B > 2) {
        if (choose_wide_matvec_unroll(two_items, B) == 1) {
          return launch_matvec_grid<T, B, kWideMatvecRows, 1>(
              wide, matvec_shape<T, B, kWideMatvecRows, 1>(wide), stream);
        }
      }
      return launch_matvec_grid<T, B, kWideMatvecRows, kWideMatvecUnroll>(wide, two_items, stream);
    }
  }
  return launch_matvec_grid<T, B, kRows, kUnroll>(launch, shape, stream);
}

// Runs activation rows in groups of kMaxMatvecRows, each group with the kernel of its size.
template <TensorType T>
Status launch_matvec(const MatvecLaunch& launch, LaunchStream stream) {
  for (int i = 0; i < launch.n_parts; ++i) {
    LS_CUDA_REQUIRE(launch.parts[i].w.type == T &&
                    launch.parts[i].w.cols == launch.parts[0].w.cols &&
                    launch.parts[i].w.cols % DotFormat<T>::kItemElems == 0);
  }
  for (int32_t first = 0; first < launch.n_rows; first += kMaxMatvecRows) {
    MatvecLaunch group = launch;
    if constexpr (DotFormat<T>::kQ8) {
      group.xq.qs = launch.xq.qs + first * launch.xq.qs_stride;
      group.xq.ds = launch.xq.ds + first * launch.xq.ds_stride;
    } else {
      group.x = launch.x + first * launch.x_stride;
    }
    for (int i = 0; i < launch.n_parts; ++i) {
      group.parts[i].y = launch.parts[i].y + first * launch.parts[i].y_stride;
    }
    group.n_rows = std::min(kMaxMatvecRows, launch.n_rows - first);
    switch (group.n_rows) {
      case 1: LS_RETURN_IF_ERROR((launch_matvec_rows<T, 1>(group, stream))); break;
      case 2: LS_RETURN_IF_ERROR((launch_matvec_rows<T, 2>(group, stream))); break;
      case 3: LS_RETURN_IF_ERROR((launch_matvec_rows<T, 3>(group, stream))); break;
      case 4: LS_RETURN_IF_ERROR((launch_matvec_rows<T, 4>(group, stream))); break;
      case 5: LS_RETURN_IF_ERROR((launch_matvec_rows<T, 5>(group, stream))); break;
      case 6: LS_RETURN_IF_ERROR((launch_matvec_rows<T, 6>(group, stream))); break;
      case 7: LS_RETURN_IF_ERROR((launch_matvec_rows<T, 7>(group, stream))); break;
      default: LS_RETURN_IF_ERROR((launch_matvec_rows<T, 8>(group, stream))); break;
    }
  }
  return Status::ok();
}

}  // namespace llamaserve::cuda
