// Decode attention over an f16 cache: one block per (row, KV head, split), four warps that each
// take every fourth run of kUnroll positions of the split. A warp reads a position's K and V rows
// whole (lane l holds dims [l E, l E + E), E = D / 32: one coalesced 128- or 256-byte row per
// load), with kUnroll positions' loads in flight at once, and the next run's loads issued before
// this run's arithmetic (decode attention over 256 x 640 positions at 95% of the copy bandwidth
// against 89% without); scores are warp sums (butterfly shuffles), the online softmax and the P·V
// sums stay in registers, and no barrier stands in the loop. The four warps' partial results are
// combined once at the end through shared memory (attention_decode_block.cuh). This is the shape
// of decode steps: one query row per sequence, where the CUDA-core kernel's chunk-and-barrier
// phases (built for tiles of many query vectors) leave the memory system idle. A Q8_0 cache, and
// an f16 cache's grouped queries, take the tensor-core kernel (attention_decode_mma.cu).
//
// Given AttentionArgs::earlier_kv_settled, a warp's first run of positions (all of a split's
// positions for short contexts) is loaded before the wait for the kernel that wrote the queries
// and the row's own K/V (programmatic dependent launch, launch.cuh): every position below the
// row's own was written by an earlier pass, so only the query and that one position wait.
#include "backend/cuda/attention_decode.h"

#include <cuda_fp16.h>

#include "backend/cuda/attention_decode_block.cuh"
#include "backend/cuda/check.h"
#include "backend/cuda/launch.cuh"

namespace llamaserve::cuda {
namespace {

// Warps per block: 4, or 16 (8) where those blocks fit one wave of the SMs (few rows: each warp
// then takes fewer positions; in waves the SMs would wait for a 16-warp block's last warp, 16
// sequences of 192 positions 24.9 against 21.5 us with 4 warps a block, 16.8 with 8).
// Registers: 16 warps of groups wider than kDecodeManyWarpsGroup do not fit an SM, 8 warps
// four an SM only for kDecodeMidWarpsGroup.
constexpr int kFewWarps = 4;
constexpr int kMidWarps = 8;
constexpr int kManyWarps = 16;
constexpr int kUnroll = 4;  // positions per warp per step, their loads in flight together

// One lane's E = D / 32 halves of a row.
template <int E>
using KvLanes = typename WideWord<2 * E>::Type;

template <int E>
__device__ __forceinline__ void lanes_to_float(const KvLanes<E>& v, float (&f)[E]) {
  const auto* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
  for (int i = 0; i < E / 2; ++i) {
    const float2 p = __half22float2(h[i]);
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}

// 16 warps: one block an SM (minimum 1), so that ptxas may use up to 128 registers rather than
// spill.
template <int D, int G, int W>
__global__ void __launch_bounds__(32 * W, W == kManyWarps ? 1 : 0)
    attention_decode_kernel(const AttentionArgs a) {
  constexpr int kWarps = W;
  pdl_launch_dependents();
  constexpr int E = D / 32;
  using Lanes = KvLanes<E>;
  __shared__ float m_s[kWarps][G];
  __shared__ float l_s[kWarps][G];
  __shared__ float acc_s[kWarps][G][D];

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const DecodeBlock b = decode_block<1>(a);
  const int kv_head = b.kv_head;
  const int end = b.end;
  const int32_t* block_table =
      a.block_tables + static_cast<int64_t>(a.seq_index[b.row]) * a.blocks_per_seq;
  const auto* k_cache = static_cast<const __half*>(a.k_cache);
  const auto* v_cache = static_cast<const __half*>(a.v_cache);

  // A run's registers: positions [t0, t0 + kUnroll) of K and V.
  struct Run {
    Lanes k[kUnroll], v[kUnroll];
  };
  // Positions [t0, t0 + kUnroll) of the run: those in [from, to) are loaded, those at or past
  // `end` are zeros (their scores are masked), the others are left as they are.
  auto load_run = [&](Run& r, int t0, int from, int to) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int t = t0 + u;
      if (t >= from && t < to) {
        const int64_t block = block_table[t / a.block_size];
        const int64_t slot =
            ((block * a.block_size + t % a.block_size) * a.n_head_kv + kv_head) * D + lane * E;
        r.k[u] = __ldg(reinterpret_cast<const Lanes*>(k_cache + slot));
        r.v[u] = __ldg(reinterpret_cast<const Lanes*>(v_cache + slot));
      } else if (t >= end) {
        r.k[u] = Lanes{};
        r.v[u] = Lanes{};
      }
    }
  };
  // Positions below `settled` were written before this pass: the first run's loads of them go
  // out before the wait (the tile, positions and block table are staged by the host).
  const int settled = a.earlier_kv_settled ? min(end, b.ctx - 1) : b.start;
  // The warp's runs start at t0 (the loop's bound: every lane of a warp takes the same
  // iterations, as the shuffles need).
  constexpr int kStride = kWarps * kUnroll;
  int t0 = b.start + warp * kUnroll;
  Run run;
  load_run(run, t0, t0, settled);
  pdl_wait();
  load_run(run, t0, max(t0, settled), end);

  float q[G][E];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const float* qp =
        a.q + static_cast<int64_t>(b.row) * a.q_stride + (kv_head * G + g) * D + lane * E;
#pragma unroll
    for (int e = 0; e < E; ++e) q[g][e] = qp[e] * a.scale;
  }
  float m[G], l[G], acc[G][E];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) acc[g][e] = 0.0f;
  }

  for (; t0 < end; t0 += kStride) {
    // The next run's loads go out before this run's arithmetic.
    Run next;
    if (t0 + kStride < end) load_run(next, t0 + kStride, t0 + kStride, end);
    // Scores, a position's K row converted once.
    float s[G][kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float k[E];
      lanes_to_float<E>(run.k[u], k);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < E; ++e) dot = fmaf(q[g][e], k[e], dot);
        s[g][u] = dot;
      }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
#pragma unroll
      for (int g = 0; g < G; ++g) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) s[g][u] += __shfl_xor_sync(0xffffffffu, s[g][u], offset);
      }
    }
    // The online softmax of each query head; s becomes the probabilities.
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float m_new = m[g];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (t0 + u >= end) s[g][u] = -INFINITY;
        m_new = fmaxf(m_new, s[g][u]);
      }
      const float alpha = __expf(m[g] - m_new);  // 0 while m[g] is -inf
      float p_sum = 0.0f;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        s[g][u] = __expf(s[g][u] - m_new);
        p_sum += s[g][u];
      }
      l[g] = fmaf(l[g], alpha, p_sum);
      m[g] = m_new;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[g][e] *= alpha;
    }
    // P·V, a position's V row converted once.
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float v[E];
      lanes_to_float<E>(run.v[u], v);
#pragma unroll
      for (int g = 0; g < G; ++g) {
#pragma unroll
        for (int e = 0; e < E; ++e) acc[g][e] = fmaf(s[g][u], v[e], acc[g][e]);
      }
    }
    run = next;
  }

  // The warps' (max, sum, P·V) per query head into one.
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (lane == 0) {
      m_s[warp][g] = m[g];
      l_s[warp][g] = l[g];
    }
#pragma unroll
    for (int e = 0; e < E; ++e) acc_s[warp][g][lane * E + e] = acc[g][e];
  }
  __syncthreads();
  finish_decode_block<D, kWarps, G>(a, b, G, m_s, l_s, &acc_s[0][0][0], G * D);
}

template <int D, int G>
Status launch_group(const AttentionArgs& a, LaunchStream stream) {
  const auto [grid, blocks] = decode_grid(a);
  int warps = a.decode_warps;
  if (warps == 0) {
    const int64_t sms = current_device_sm_count();
    warps = G <= kDecodeManyWarpsGroup && blocks <= sms                               ? kManyWarps
            : G <= kDecodeMidWarpsGroup && blocks <= kDecodeMidWarpsBlocksPerSm * sms ? kMidWarps
                                                                                      : kFewWarps;
  }
  if constexpr (G <= kDecodeManyWarpsGroup) {
    if (warps == kManyWarps) {
      LS_CUDA_CHECK(launch_kernel(attention_decode_kernel<D, G, kManyWarps>, grid, 32 * kManyWarps,
                                  0, stream, a));
      return Status::ok();
    }
  }
  if constexpr (G <= kDecodeMidWarpsGroup) {
    if (warps == kMidWarps) {
      LS_CUDA_CHECK(launch_kernel(attention_decode_kernel<D, G, kMidWarps>, grid, 32 * kMidWarps, 0,
                                  stream, a));
      return Status::ok();
    }
  }
  if (warps != kFewWarps) {
    return make_error(StatusCode::kInvalidArgument,
                      "attention: the decode kernel runs 4 warps per block, 8 for up to {} and 16 "
                      "for up to {} query heads per KV head; not {} for {}",
                      kDecodeMidWarpsGroup, kDecodeManyWarpsGroup, warps, G);
  }
  LS_CUDA_CHECK(
      launch_kernel(attention_decode_kernel<D, G, kFewWarps>, grid, 32 * kFewWarps, 0, stream, a));
  return Status::ok();
}

}  // namespace

template <int D>
Status launch_attention_decode(const AttentionArgs& a, LaunchStream stream) {
  switch (a.n_head / a.n_head_kv) {
    case 1: return launch_group<D, 1>(a, stream);
    case 2: return launch_group<D, 2>(a, stream);
    case 3: return launch_group<D, 3>(a, stream);
    case 4: return launch_group<D, 4>(a, stream);
    case 5: return launch_group<D, 5>(a, stream);
    case 6: return launch_group<D, 6>(a, stream);
    case 7: return launch_group<D, 7>(a, stream);
    case 8: return launch_group<D, 8>(a, stream);
    default:
      return make_error(StatusCode::kInvalidArgument,
                        "attention: the decode kernel handles up to {} query heads per KV head, "
                        "not {}",
                        kMaxDecodeGroup, a.n_head / a.n_head_kv);
  }
}

template Status launch_attention_decode<64>(const AttentionArgs&, LaunchStream);
template Status launch_attention_decode<128>(const AttentionArgs&, LaunchStream);

}  // namespace llamaserve::cuda
