#include <cstdint>

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

// Few rows with something to add first (a residual, the ranks' partials of tensor parallelism)
// or of odd widths: one block of many threads a row, unrolled loops keeping the loads of a row
// in flight together (rows without an addition take rmsnorm_slices_kernel or its wide slices
// below).
constexpr int kNormThreads = 1024;

// The sum of v over a block of kThreads threads, every thread given it (shared: kThreads / 32
// floats; a barrier, so every thread of the block calls it): each warp's sum, then the warps'
// in warp order.
template <int kThreads>
__device__ __forceinline__ float block_sum(float v, float* shared) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int i = 0; i < kThreads / 32; ++i) total += shared[i];
  return total;
}

// Elements of a row one thread holds the norm weights of before the wait (4096-wide rows).
constexpr int kPrefetchedWeights = 4;

// One block per row. The row is read twice (sum of squares, then the scaled write); the second
// read hits L1/L2. The weights are constant: a thread's first ones are loaded before the wait
// for the kernel that wrote the row (programmatic dependent launch, launch.cuh).
// R: 0, or at least the ranks of the fused reduction it consumes, whose words it loads all
// at once (peer_reduce_sums).
template <int R>
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
  constexpr bool reduce = R > 0;
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
  if constexpr (reduce) {
    // Elements a round, their ranks' words all in flight together (8 words: within the
    // registers a 1024-thread block allows).
    constexpr int kAtOnce = R >= 8 ? 1 : 8 / R;
    for (int64_t c0 = threadIdx.x; c0 < a.n; c0 += kAtOnce * kNormThreads) {
      int64_t at[kAtOnce];
      bool valid[kAtOnce];
      float partials[kAtOnce];
#pragma unroll
      for (int k = 0; k < kAtOnce; ++k) {
        at[k] = c0 + static_cast<int64_t>(k) * kNormThreads;
        valid[k] = at[k] < a.n;
      }
      peer_reduce_sums<kAtOnce, R>(a.reduce, epoch, row * a.n, at, valid, partials);
#pragma unroll
      for (int k = 0; k < kAtOnce; ++k) {
        if (!valid[k]) continue;
        const float v = x[at[k]] + partials[k];
        x[at[k]] = v;
        sum_sq = fmaf(v, v, sum_sq);
      }
    }
  }
#pragma unroll 4
  for (int64_t c = reduce ? a.n : threadIdx.x; c < a.n; c += kNormThreads) {
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
    }
    sum_sq = fmaf(v, v, sum_sq);
  }
  const float total =
      block_sum<kNormThreads>(sum_sq, shared);  // (a barrier: every thread's sums are read)
  if constexpr (reduce) peer_reduce_done(a.reduce);
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

// Few rows (decode steps) with nothing to add first: each row is split into slices of
// kSliceThreads elements, one block a slice. Every block sums the whole row's squares itself,
// all of its loads in flight at once (a 4096-wide row is 16 KB, read from L2 once a block), and
// normalizes only its slice: one memory round trip and one 8-warp barrier after the wait, where
// the 1024-thread kernel below (loads, a 32-warp barrier, a 32-term sum, a second pass, on one
// SM) kept a 7B decode step's norms exposed about 5 us each after their producer
// (bench/results/2026-12-05-h100-kernel-timelines.md). The row is only read, so no block sees
// another's writes.
constexpr int kSliceThreads = 256;
constexpr int kSliceMaxVecs = 8;  // float4s a thread sums: rows of up to 8192 elements

// The reciprocal RMS of row `x4` (n / 4 float4s), summed by every thread of the block (kVecs
// float4s each, all loads in flight together) and added over the block (one barrier: every thread
// of the block calls it).
template <int kVecs>
__device__ __forceinline__ float slice_row_inv_rms(const RmsNormArgs& a, const float4* x4) {
  const int64_t n4 = a.n / 4;
  float4 v[kVecs];
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * kSliceThreads;
    v[k] = i < n4 ? x4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  float sum_sq = 0.0f;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    sum_sq = fmaf(v[k].x, v[k].x, sum_sq);
    sum_sq = fmaf(v[k].y, v[k].y, sum_sq);
    sum_sq = fmaf(v[k].z, v[k].z, sum_sq);
    sum_sq = fmaf(v[k].w, v[k].w, sum_sq);
  }
  __shared__ float warp_sums[kSliceThreads / 32];
  const float total = block_sum<kSliceThreads>(sum_sq, warp_sums);
  return rsqrtf(total / static_cast<float>(a.n) + a.eps);
}

template <int kVecs>
__global__ void __launch_bounds__(kSliceThreads) rmsnorm_slices_kernel(const RmsNormArgs a) {
  pdl_launch_dependents();
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kSliceThreads + threadIdx.x;
  const float w = c < a.n ? __ldg(a.weight + c) : 0.0f;
  pdl_wait();
  const int64_t row = blockIdx.y;
  const int64_t in_row = a.row_ids != nullptr ? a.row_ids[row] : row;
  const float* x = a.x + in_row * a.x_stride;
  const float inv_rms = slice_row_inv_rms<kVecs>(a, reinterpret_cast<const float4*>(x));
  if (c >= a.n) return;  // whole warps where the output is 8-bit (n % 32 == 0)
  const float value = x[c] * inv_rms * w;
  if (a.y_half.data != nullptr) {
    store_half(a.y_half, row, c, value);
    return;
  }
  a.y[row * a.y_stride + c] = value;
  if (a.yq.qs != nullptr) {
    const int lane = threadIdx.x & 31;
    quantize_q8_warp(value, lane, a.yq.qs + row * a.yq.qs_stride + (c - lane),
                     a.yq.ds + row * a.yq.ds_stride + c / kQ8Block);
  }
}

// Decode batches of 16 to kWideSliceMaxRows rows (the quantized tensor-core products' inputs)
// with nothing to add first: as rmsnorm_slices_kernel, in slices of 4 x kSliceThreads elements,
// four a thread (a float4 in, four values out), so that a row is read by a quarter as many
// blocks. Where one small block a row (rmsnorm_rows_kernel) left each norm of a 64-sequence
// step exposed about 4 us after its producer (bench/results/2026-12-05-h100-kernel-timelines.md).
constexpr int64_t kWideSliceMaxRows = 64;

template <int kVecs>
__global__ void __launch_bounds__(kSliceThreads) rmsnorm_wide_slices_kernel(const RmsNormArgs a) {
  pdl_launch_dependents();
  const int64_t c4 = static_cast<int64_t>(blockIdx.x) * kSliceThreads + threadIdx.x;
  const int64_t n4 = a.n / 4;
  const float4 w = c4 < n4 ? __ldg(reinterpret_cast<const float4*>(a.weight) + c4)
                           : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  pdl_wait();
  const int64_t row = blockIdx.y;
  const int64_t in_row = a.row_ids != nullptr ? a.row_ids[row] : row;
  const auto* x4 = reinterpret_cast<const float4*>(a.x + in_row * a.x_stride);
  const float inv_rms = slice_row_inv_rms<kVecs>(a, x4);
  if (c4 >= n4) return;
  const float4 x = x4[c4];
  const float4 value = make_float4(x.x * inv_rms * w.x, x.y * inv_rms * w.y, x.z * inv_rms * w.z,
                                   x.w * inv_rms * w.w);
  if (a.y_half.data != nullptr) {
    store_half4(a.y_half, row, 4 * c4, value);
  } else {
    reinterpret_cast<float4*>(a.y + row * a.y_stride)[c4] = value;
  }
}

// Batches of many rows (prompts, larger decode batches): a small block per row, each thread
// holding kRowVecs groups of 4 elements in registers, every load of the row (and of its
// residual or peers' partials) issued before any is used, so that a row costs one memory round
// trip and the rows of a pass run in one wave. The 1024-thread kernel above reads a row in
// four dependent steps and re-reads it for the output: fine for the one row of a decode step,
// five times slower per row for a 512-row prompt.
// The fewest rows that take the kernel below, the 4-element groups a thread holds, and the
// widest rows it takes (4 x kRowVecs x its largest block).
constexpr int64_t kRowKernelMinRows = 16;
constexpr int kRowVecs = 8;
constexpr int kRowThreadsMax = 512;

__device__ __forceinline__ float4 add4(float4 a, float4 b) {
  return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

// One block of kRowThreads per row; no 8-bit output, no fused reduction (rmsnorm() routes
// those above).
template <int kRowThreads>
__global__ void __launch_bounds__(kRowThreads) rmsnorm_rows_kernel(const RmsNormArgs a) {
  pdl_launch_dependents();
  const int64_t n4 = a.n / 4;
  auto at = [&](int k) { return threadIdx.x + static_cast<int64_t>(k) * kRowThreads; };
  float4 w[kRowVecs];
#pragma unroll
  for (int k = 0; k < kRowVecs; ++k) {
    if (at(k) < n4) w[k] = __ldg(reinterpret_cast<const float4*>(a.weight) + at(k));
  }
  pdl_wait();
  const bool pulled = a.pull_slot >= 0;
  if (pulled) peer_pull_wait(a.reduce);
  const int64_t row = blockIdx.x;
  const int64_t in_row = a.row_ids != nullptr ? a.row_ids[row] : row;
  float4* x = reinterpret_cast<float4*>(const_cast<float*>(a.x) + in_row * a.x_stride);
  float4 v[kRowVecs];
#pragma unroll
  for (int k = 0; k < kRowVecs; ++k) {
    if (at(k) < n4) v[k] = x[at(k)];
  }
  const int64_t at_residual = row * a.residual_stride;
  const bool adds = pulled || a.residual != nullptr || a.half_residual != nullptr;
  if (pulled) {
    // The sum over ranks in rank order from 0, then added: peer_pull_sum's bits.
    float4 sum[kRowVecs];
#pragma unroll
    for (int k = 0; k < kRowVecs; ++k) sum[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 1
    for (int r = 0; r < a.reduce.n_ranks; ++r) {
#pragma unroll
      for (int k = 0; k < kRowVecs; ++k) {
        if (at(k) < n4)
          sum[k] =
              add4(sum[k], peer_pull_element4(a.reduce, r, a.pull_slot, at_residual + 4 * at(k)));
      }
    }
#pragma unroll
    for (int k = 0; k < kRowVecs; ++k) v[k] = add4(v[k], sum[k]);
  } else if (a.residual != nullptr) {
    const float4* res = reinterpret_cast<const float4*>(a.residual + at_residual);
#pragma unroll
    for (int k = 0; k < kRowVecs; ++k) {
      if (at(k) < n4) v[k] = add4(v[k], res[at(k)]);
    }
  } else if (a.half_residual != nullptr) {
    const void* res = static_cast<const uint16_t*>(a.half_residual) + at_residual;
#pragma unroll
    for (int k = 0; k < kRowVecs; ++k) {
      if (at(k) < n4) v[k] = add4(v[k], load_half4(res, 4 * at(k), a.half_residual_bf16));
    }
  }
  float sum_sq = 0.0f;
#pragma unroll
  for (int k = 0; k < kRowVecs; ++k) {
    if (at(k) < n4) {
      if (adds) x[at(k)] = v[k];
      sum_sq = fmaf(v[k].x, v[k].x,
                    fmaf(v[k].y, v[k].y, fmaf(v[k].z, v[k].z, fmaf(v[k].w, v[k].w, sum_sq))));
    }
  }
  __shared__ float partial[kRowThreads / 32];
  const float total = block_sum<kRowThreads>(sum_sq, partial);
  const float inv_rms = rsqrtf(total / static_cast<float>(a.n) + a.eps);
#pragma unroll
  for (int k = 0; k < kRowVecs; ++k) {
    if (at(k) >= n4) continue;
    const float4 o = make_float4(v[k].x * inv_rms * w[k].x, v[k].y * inv_rms * w[k].y,
                                 v[k].z * inv_rms * w[k].z, v[k].w * inv_rms * w[k].w);
    if (a.y_half.data != nullptr) {
      store_half4(a.y_half, row, 4 * at(k), o);
    } else {
      reinterpret_cast<float4*>(a.y + row * a.y_stride)[at(k)] = o;
    }
  }
}

bool aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Whether the rows get something added before they are normalized: a residual, or the ranks'
// pulled partials.
bool adds_first(const RmsNormArgs& a) {
  return a.pull_slot >= 0 || a.residual != nullptr || a.half_residual != nullptr;
}

// Whether the output rows are whole aligned 4-element groups (16 bytes for floats, 8 for halves).
bool output_in_groups(const RmsNormArgs& a) {
  return a.y_half.data != nullptr ? a.y_half.stride % 4 == 0 && aligned(a.y_half.data, 8)
                                  : a.y_stride % 4 == 0 && aligned(a.y, 16);
}

// Whether rmsnorm_rows_kernel takes these rows: many of them, 4-element groups aligned
// (16 bytes for floats, 8 for halves), no 8-bit output, no fused reduction.
bool row_kernel_takes(const RmsNormArgs& a) {
  const bool pulled = a.pull_slot >= 0;
  return a.n_rows >= kRowKernelMinRows && a.yq.qs == nullptr && (pulled || !a.reduce.active()) &&
         a.n % 4 == 0 && a.n <= 4 * kRowVecs * kRowThreadsMax && a.x_stride % 4 == 0 &&
         aligned(a.x, 16) && aligned(a.weight, 16) && output_in_groups(a) &&
         (!adds_first(a) || a.residual_stride % 4 == 0) &&
         (a.residual == nullptr || aligned(a.residual, 16)) &&
         (a.half_residual == nullptr || aligned(a.half_residual, 8));
}

// Whether rmsnorm_slices_kernel takes these rows: fewer than the rows kernel takes, nothing to
// add (residual, fused or pulled sums) and no output over the input, whole aligned 4-element
// groups of rows up to kSliceMaxVecs groups a thread.
bool slices_kernel_takes(const RmsNormArgs& a) {
  return a.n_rows < kRowKernelMinRows && !adds_first(a) && !a.reduce.active() &&
         (a.y_half.data != nullptr || a.y != a.x) && a.n % 4 == 0 &&
         a.n <= 4 * kSliceMaxVecs * kSliceThreads && a.x_stride % 4 == 0 && aligned(a.x, 16);
}

// Whether rmsnorm_wide_slices_kernel takes these rows: 16 to kWideSliceMaxRows of them, nothing
// to add, no 8-bit output and no output over the input, whole aligned 4-element groups.
bool wide_slices_take(const RmsNormArgs& a) {
  return a.n_rows >= kRowKernelMinRows && a.n_rows <= kWideSliceMaxRows && !adds_first(a) &&
         !a.reduce.active() && a.yq.qs == nullptr && a.n % 4 == 0 &&
         a.n <= 4 * kSliceMaxVecs * kSliceThreads && a.x_stride % 4 == 0 && aligned(a.x, 16) &&
         aligned(a.weight, 16) && (a.y_half.data != nullptr || a.y != a.x) && output_in_groups(a);
}

}  // namespace

Status rmsnorm(const RmsNormArgs& a, LaunchStream stream) {
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
  if (wide_slices_take(a)) {
    const dim3 grid(static_cast<unsigned>((a.n / 4 + kSliceThreads - 1) / kSliceThreads),
                    static_cast<unsigned>(a.n_rows));
    LS_CUDA_CHECK(
        a.n <= 4 * 4 * kSliceThreads
            ? launch_kernel(rmsnorm_wide_slices_kernel<4>, grid, kSliceThreads, 0, stream, a)
            : launch_kernel(rmsnorm_wide_slices_kernel<kSliceMaxVecs>, grid, kSliceThreads, 0,
                            stream, a));
    return Status::ok();
  }
  if (row_kernel_takes(a)) {
    const unsigned rows = static_cast<unsigned>(a.n_rows);
    // The smallest block whose threads hold the row: 128 threads up to 4096 elements.
    const int64_t vecs = (a.n / 4 + kRowVecs - 1) / kRowVecs;
    LS_CUDA_CHECK(vecs <= 128   ? launch_kernel(rmsnorm_rows_kernel<128>, rows, 128, 0, stream, a)
                  : vecs <= 256 ? launch_kernel(rmsnorm_rows_kernel<256>, rows, 256, 0, stream, a)
                                : launch_kernel(rmsnorm_rows_kernel<kRowThreadsMax>, rows,
                                                kRowThreadsMax, 0, stream, a));
    return Status::ok();
  }
  if (slices_kernel_takes(a)) {
    const dim3 grid(static_cast<unsigned>((a.n + kSliceThreads - 1) / kSliceThreads),
                    static_cast<unsigned>(a.n_rows));
    LS_CUDA_CHECK(a.n <= 4 * 4 * kSliceThreads
                      ? launch_kernel(rmsnorm_slices_kernel<4>, grid, kSliceThreads, 0, stream, a)
                      : launch_kernel(rmsnorm_slices_kernel<kSliceMaxVecs>, grid, kSliceThreads, 0,
                                      stream, a));
    return Status::ok();
  }
  const unsigned blocks = static_cast<unsigned>(a.n_rows);
  const int ranks = a.pull_slot < 0 && a.reduce.active() ? a.reduce.n_ranks : 0;
  if (ranks == 0) {
    LS_CUDA_CHECK(launch_kernel(rmsnorm_kernel<0>, blocks, kNormThreads, 0, stream, a));
  } else if (ranks == 2) {
    LS_CUDA_CHECK(launch_kernel(rmsnorm_kernel<2>, blocks, kNormThreads, 0, stream, a));
  } else if (ranks <= 4) {
    LS_CUDA_CHECK(launch_kernel(rmsnorm_kernel<4>, blocks, kNormThreads, 0, stream, a));
  } else {
    LS_CUDA_CHECK(launch_kernel(rmsnorm_kernel<kMaxPeerRanks>, blocks, kNormThreads, 0, stream, a));
  }
  return Status::ok();
}

}  // namespace llamaserve::cuda
