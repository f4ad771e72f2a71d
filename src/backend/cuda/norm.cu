#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/check.h"
#include "backend/cuda/half_rows.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/norm.h"
#include "backend/cuda/peer_reduce.cuh"

namespace llamaserve::cuda {
namespace {

// Decode steps normalize one row per launch: many threads and unrolled loops keep the loads of
// a row in flight together, so the kernel costs about one memory round trip, not one per
// element a thread handles.
constexpr int kNormThreads = 1024;

__device__ float block_sum(float v, float* shared) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int i = 0; i < kNormThreads / 32; ++i) total += shared[i];
  return total;
}

// Elements of a row one thread holds the norm weights of before the wait (4096-wide rows).
constexpr int kPrefetchedWeights = 4;

// One block per row. The row is read twice (sum of squares, then the scaled write); the second
// read hits L1/L2. The weights are constant: a thread's first ones are loaded before the wait
// for the kernel that wrote the row (programmatic dependent launch, launch.cuh).
__global__ void __launch_bounds__(kNormThreads) rmsnorm_kernel(const RmsNormArgs a) {
  pdl_launch_dependents();
  float weights[kPrefetchedWeights];
#pragma unroll
  for (int k = 0; k < kPrefetchedWeights; ++k) {
    const int64_t c = threadIdx.x + static_cast<int64_t>(k) * kNormThreads;
    weights[k] = c < a.n ? __ldg(a.weight + c) : 0.0f;
  }
  // body(c, weight[c]) for this thread's elements c of the row.
  auto for_each_weighted = [&](auto body) {
#pragma unroll
    for (int k = 0; k < kPrefetchedWeights; ++k) {
      const int64_t c = threadIdx.x + static_cast<int64_t>(k) * kNormThreads;
      if (c < a.n) body(c, weights[k]);
    }
    for (int64_t c = threadIdx.x + static_cast<int64_t>(kPrefetchedWeights) * kNormThreads; c < a.n;
         c += kNormThreads) {
      body(c, a.weight[c]);
    }
  };
  pdl_wait();
  const bool pulled = a.pull_slot >= 0;
  if (pulled) peer_pull_wait(a.reduce);
  const bool reduce = !pulled && peer_reduce_active(a.reduce);
  const uint32_t epoch = reduce ? peer_reduce_epoch(a.reduce) : 0;
  __shared__ float shared[kNormThreads / 32];
  const int64_t row = blockIdx.x;
  const int64_t in_row = a.row_ids != nullptr ? a.row_ids[row] : row;
  float* x = const_cast<float*>(a.x) + in_row * a.x_stride;
  const float* residual = a.residual != nullptr ? a.residual + row * a.residual_stride : nullptr;
  const int64_t half_at = row * a.residual_stride;
  const auto* f16_residual = a.half_residual != nullptr && !a.half_residual_bf16
                                 ? static_cast<const __half*>(a.half_residual) + half_at
                                 : nullptr;
  const auto* bf16_residual = a.half_residual != nullptr && a.half_residual_bf16
                                  ? static_cast<const __nv_bfloat16*>(a.half_residual) + half_at
                                  : nullptr;
  float sum_sq = 0.0f;
#pragma unroll 4
  for (int64_t c = threadIdx.x; c < a.n; c += kNormThreads) {
    float v = x[c];
    if (residual != nullptr) {
      v += residual[c];
      x[c] = v;
    } else if (f16_residual != nullptr) {
      v += __half2float(f16_residual[c]);
      x[c] = v;
    } else if (bf16_residual != nullptr) {
      v += __bfloat162float(bf16_residual[c]);
      x[c] = v;
    } else if (pulled) {
      v += peer_pull_sum(a.reduce, a.pull_slot, row * a.residual_stride + c);
      x[c] = v;
    } else if (reduce) {
      v += peer_reduce_sum(a.reduce, epoch, row * a.n + c);
      x[c] = v;
    }
    sum_sq = fmaf(v, v, sum_sq);
  }
  const float total = block_sum(sum_sq, shared);  // (a barrier: every thread's sums are read)
  if (reduce) peer_reduce_done(a.reduce);
  const float inv_rms = rsqrtf(total / static_cast<float>(a.n) + a.eps);
  if (a.y_half.data != nullptr) {
    for_each_weighted(
        [&](int64_t c, float w) { store_half(a.y_half, row, c, x[c] * inv_rms * w); });
    return;
  }
  float* y = a.y + row * a.y_stride;
  if (a.yq.qs == nullptr) {
    for_each_weighted([&](int64_t c, float w) { y[c] = x[c] * inv_rms * w; });
    return;
  }
  // Warp w handles elements [32 (w + 32k), 32 (w + 32k) + 32): whole blocks, since n % 32 == 0.
  const int lane = threadIdx.x & 31;
  int8_t* yq = a.yq.qs + row * a.yq.qs_stride;
  float4* ds = a.yq.ds + row * a.yq.ds_stride;
  for_each_weighted([&](int64_t c, float w) {
    const float v = x[c] * inv_rms * w;
    y[c] = v;
    quantize_q8_warp(v, lane, yq + (c - lane), ds + c / kQ8Block);
  });
}

}  // namespace

Status rmsnorm(const RmsNormArgs& a, cudaStream_t stream) {
  LS_CUDA_REQUIRE(a.x != nullptr && a.weight != nullptr);
  LS_CUDA_REQUIRE(a.y_half.data != nullptr
                      ? a.yq.qs == nullptr && a.y_half.stride >= a.n && a.y_half.stride % 2 == 0
                      : a.y != nullptr);
  LS_CUDA_REQUIRE(a.n > 0 && a.n_rows >= 0 && a.eps >= 0.0f);
  LS_CUDA_REQUIRE(a.residual == nullptr || a.half_residual == nullptr);
  const bool adds = a.residual != nullptr || a.half_residual != nullptr;
  LS_CUDA_REQUIRE(!adds || (a.row_ids == nullptr && a.y != a.x));
  LS_CUDA_REQUIRE(!a.reduce.active() || !adds);
  if (a.pull_slot >= 0) {
    LS_CUDA_REQUIRE(a.reduce.pull_fits(a.n_rows, a.residual_stride) && a.pull_slot <= 1 &&
                    a.row_ids == nullptr && a.y != a.x && a.residual_stride >= a.n);
  }
  LS_CUDA_REQUIRE(a.pull_slot >= 0 || !a.reduce.active() ||
                  (a.residual == nullptr && a.row_ids == nullptr && a.y != a.x &&
                   a.n_rows * a.n <= a.reduce.capacity));
  LS_CUDA_REQUIRE(a.n_rows <= 0x7fffffff);
  LS_CUDA_REQUIRE(a.yq.qs == nullptr || (a.n % kQ8Block == 0 && a.yq.ds != nullptr &&
                                         a.yq.qs_stride % 16 == 0 && a.yq.qs_stride >= a.n));
  if (a.n_rows == 0) return Status::ok();
  LS_CUDA_CHECK(
      launch_kernel(rmsnorm_kernel, static_cast<unsigned>(a.n_rows), kNormThreads, 0, stream, a));
  return Status::ok();
}

}  // namespace llamaserve::cuda
