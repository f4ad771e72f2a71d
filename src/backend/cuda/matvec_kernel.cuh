// The matvec kernel template (see matvec.h for the contract). Included only by the
// matvec_*.cu files, each of which instantiates it for its weight types.
//
// Geometry: a block of 128 threads owns RW consecutive weight rows. Its threads walk the units
// of those rows (see formats.cuh) in lock step: thread t takes units t, t + 128, ..., so a
// warp's 16-byte loads of one row are 512 contiguous bytes. Each thread keeps the next unit's
// loads in flight while it decodes the current one, multiplies the decoded run with the
// matching 4..16 activations of each of the B activation rows, and keeps RW × B fp32 partial
// sums. A warp shuffle and a pass through shared memory reduce them at the end.
//
// The RW rows of a block share every activation load, which keeps L1 traffic for the fp32
// activations (up to 8 bytes per weight byte for 4-bit types) below the weight stream's cost.
#pragma once

#include <algorithm>

#include "backend/cuda/check.h"
#include "backend/cuda/formats.cuh"
#include "backend/cuda/matvec_launch.h"

namespace llamaserve::cuda {

inline constexpr int kMatvecThreads = 128;

// Rows per block: more rows share the activation loads; fewer keep registers in check when
// there are many activation rows.
template <int B>
inline constexpr int kMatvecRowsPerBlock = B <= 4 ? 4 : 2;

template <TensorType T, int B, int RW>
__global__ void __launch_bounds__(kMatvecThreads) matvec_kernel(const MatvecArgs a) {
  using F = Format<T>;
  constexpr int kElems = F::kRunLen * F::kRuns;
  const int units = static_cast<int>(a.w.cols / kElems);
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * RW;

  // The last block may own fewer than RW rows: it reads the last row again and drops it.
  int64_t rows[RW];
#pragma unroll
  for (int r = 0; r < RW; ++r) rows[r] = min(row0 + r, a.w.rows - 1);

  float acc[RW][B];
#pragma unroll
  for (int r = 0; r < RW; ++r) {
#pragma unroll
    for (int b = 0; b < B; ++b) acc[r][b] = 0.0f;
  }

  int u = threadIdx.x;
  typename F::Raw cur[RW];
  if (u < units) {
#pragma unroll
    for (int r = 0; r < RW; ++r) cur[r] = F::load(a.w, rows[r], u);
  }
  for (; u < units; u += kMatvecThreads) {
    const int next_u = u + kMatvecThreads;
    typename F::Raw next[RW];
    if (next_u < units) {
#pragma unroll
      for (int r = 0; r < RW; ++r) next[r] = F::load(a.w, rows[r], next_u);
    }
#pragma unroll
    for (int k = 0; k < F::kRuns; ++k) {
      float w[RW][F::kRunLen];
      float scale[RW];
#pragma unroll
      for (int r = 0; r < RW; ++r) {
        float min = 0.0f;
        scale[r] = 1.0f;
        F::decode(cur[r], u, k, w[r], scale[r], min);
        // With a min the run is dequantized once for all activation rows; without one the
        // scale is applied to the run's sum instead of to every element.
        if constexpr (F::kHasMin) dequantize_run<F>(w[r], scale[r], min);
      }
      const int base = F::run_base(u, k);
#pragma unroll
      for (int b = 0; b < B; ++b) {
        const float4* xp = reinterpret_cast<const float4*>(a.x + b * a.x_stride + base);
        float xv[F::kRunLen];
#pragma unroll
        for (int i = 0; i < F::kRunLen / 4; ++i) {
          const float4 v = __ldg(xp + i);
          xv[4 * i] = v.x;
          xv[4 * i + 1] = v.y;
          xv[4 * i + 2] = v.z;
          xv[4 * i + 3] = v.w;
        }
#pragma unroll
        for (int r = 0; r < RW; ++r) {
          float s = 0.0f;
#pragma unroll
          for (int i = 0; i < F::kRunLen; ++i) s = fmaf(w[r][i], xv[i], s);
          if constexpr (F::kHasScale && !F::kHasMin) {
            acc[r][b] = fmaf(scale[r], s, acc[r][b]);
          } else {
            acc[r][b] += s;
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < RW; ++r) cur[r] = next[r];
  }

  constexpr int kWarps = kMatvecThreads / 32;
  __shared__ float partial[kWarps][RW * B];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
#pragma unroll
  for (int r = 0; r < RW; ++r) {
#pragma unroll
    for (int b = 0; b < B; ++b) {
      float v = acc[r][b];
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
      if (lane == 0) partial[warp][r * B + b] = v;
    }
  }
  __syncthreads();
  if (threadIdx.x < RW * B) {
    const int r = threadIdx.x / B;
    const int b = threadIdx.x % B;
    const int64_t row = row0 + r;
    if (row < a.w.rows) {
      float sum = 0.0f;
#pragma unroll
      for (int i = 0; i < kWarps; ++i) sum += partial[i][threadIdx.x];
      if (a.bias != nullptr) sum += a.bias[row];
      float* out = a.y + b * a.y_stride + row;
      *out = a.accumulate ? *out + sum : sum;
    }
  }
}

template <TensorType T, int B>
Status launch_matvec_rows(const MatvecArgs& a, cudaStream_t stream) {
  constexpr int kRows = kMatvecRowsPerBlock<B>;
  const int64_t blocks = (a.w.rows + kRows - 1) / kRows;
  LS_CUDA_REQUIRE(blocks <= 0x7fffffff);
  matvec_kernel<T, B, kRows><<<static_cast<unsigned>(blocks), kMatvecThreads, 0, stream>>>(a);
  LS_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

// Runs activation rows in groups of kMaxMatvecRows, each group with the kernel of its size.
template <TensorType T>
Status launch_matvec(const MatvecArgs& args, cudaStream_t stream) {
  LS_CUDA_REQUIRE(args.w.type == T);
  LS_CUDA_REQUIRE(args.w.cols % kUnitElems<T> == 0);
  for (int32_t first = 0; first < args.n_rows; first += kMaxMatvecRows) {
    MatvecArgs part = args;
    part.x = args.x + first * args.x_stride;
    part.y = args.y + first * args.y_stride;
    part.n_rows = std::min(kMaxMatvecRows, args.n_rows - first);
    switch (part.n_rows) {
      case 1: LS_RETURN_IF_ERROR((launch_matvec_rows<T, 1>(part, stream))); break;
      case 2: LS_RETURN_IF_ERROR((launch_matvec_rows<T, 2>(part, stream))); break;
      case 3: LS_RETURN_IF_ERROR((launch_matvec_rows<T, 3>(part, stream))); break;
      case 4: LS_RETURN_IF_ERROR((launch_matvec_rows<T, 4>(part, stream))); break;
      case 5: LS_RETURN_IF_ERROR((launch_matvec_rows<T, 5>(part, stream))); break;
      case 6: LS_RETURN_IF_ERROR((launch_matvec_rows<T, 6>(part, stream))); break;
      case 7: LS_RETURN_IF_ERROR((launch_matvec_rows<T, 7>(part, stream))); break;
      default: LS_RETURN_IF_ERROR((launch_matvec_rows<T, 8>(part, stream))); break;
    }
  }
  return Status::ok();
}

}  // namespace llamaserve::cuda
