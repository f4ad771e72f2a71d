// Decode attention: one block per (row, KV head, split), four warps that each take every
// fourth run of kUnroll positions of the split. A warp reads a position's K and V rows whole
// (lane l holds dims [l E, l E + E), E = D / 32: one coalesced 128- or 256-byte row per load),
// with kUnroll positions' loads in flight at once; scores are warp sums (butterfly shuffles),
// the online softmax and the P·V sums stay in registers, and no barrier stands in the loop.
// The four warps' partial results are combined once at the end through shared memory. This
// is the shape of decode steps: one query row per sequence, where the CUDA-core kernel's
// chunk-and-barrier phases (built for tiles of many query vectors) leave the memory system idle.
//
// Given AttentionArgs::earlier_kv_settled, a warp's first run of positions (all of a split's
// positions for short contexts) is loaded before the wait for the kernel that wrote the queries
// and the row's own K/V (programmatic dependent launch, launch.cuh): every position below the
// row's own was written by an earlier pass, so only the query and that one position wait.
//
// With a Q8_0 cache a lane loads its E codes (a 64- or 128-byte row per warp) and its block's
// scale, converts the codes to floats, and scales its part of a score and its value weights
// once: the arithmetic of the dequantized values, on half the bytes.
#include "backend/cuda/attention_decode.h"

#include <cuda_fp16.h>

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/attention_splits.cuh"
#include "backend/cuda/check.h"
#include "backend/cuda/kv_q8.cuh"
#include "backend/cuda/launch.cuh"

namespace llamaserve::cuda {
namespace {

// Warps per block: 4, or 16 where the grid is small (few rows and short contexts: each warp
// then takes fewer positions, and no split reduction is needed to fill the GPU).
constexpr int kFewWarps = 4;
constexpr int kManyWarps = 16;
constexpr int kMaxManyWarpsGroup = 4;  // registers: 16 warps of wider groups do not fit an SM
constexpr int kUnroll = 4;  // positions per warp per step, their loads in flight together

// One lane's E values of a K or V row (E = 2 for head_dim 64, 4 for 128): E halves, or with a
// Q8_0 cache E codes and their block's scale (kv_q8.cuh), loaded in one access each.
template <int E, bool Q8>
struct KvLanes;
template <>
struct KvLanes<2, false> {
  using Raw = uint32_t;
};
template <>
struct KvLanes<4, false> {
  using Raw = uint2;
};
template <>
struct KvLanes<2, true> {
  using Raw = uint16_t;
};
template <>
struct KvLanes<4, true> {
  using Raw = uint32_t;
};

template <int E, bool Q8>
__device__ __forceinline__ void lanes_to_float(const typename KvLanes<E, Q8>::Raw& v,
                                               float (&f)[E]) {
  if constexpr (Q8) {
#pragma unroll
    for (int i = 0; i < E; ++i) f[i] = kv_code(v, i);
  } else {
    const auto* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
    for (int i = 0; i < E / 2; ++i) {
      const float2 p = __half22float2(h[i]);
      f[2 * i] = p.x;
      f[2 * i + 1] = p.y;
    }
  }
}

template <int D, int G, int W, bool Q8>
__global__ void __launch_bounds__(32 * W) attention_decode_kernel(const AttentionArgs a) {
  constexpr int kWarps = W;
  constexpr int kThreads = 32 * W;
  pdl_launch_dependents();
  constexpr int E = D / 32;
  using Lanes = typename KvLanes<E, Q8>::Raw;
  __shared__ float m_s[kWarps][G];
  __shared__ float l_s[kWarps][G];
  __shared__ float acc_s[kWarps][G][D];

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const AttentionTile tile = a.tiles[blockIdx.x];
  const int row = tile.first_row;
  const int kv_head = blockIdx.y;
  // A split tile is one split of its row's own count (AttentionArgs::split_tiles).
  const int split = tile.n_splits > 0 ? tile.split : static_cast<int>(blockIdx.z);
  const int row_splits = tile.n_splits > 0 ? tile.n_splits : a.n_splits;
  const int seq = a.seq_index[row];
  const int ctx = a.positions[row] + 1;
  const int per_split = (ctx + row_splits - 1) / row_splits;
  const int start = split * per_split;
  const int end = min(ctx, start + per_split);
  const int32_t* block_table = a.block_tables + static_cast<int64_t>(seq) * a.blocks_per_seq;
  // Element size 2 (f16) or 1 (Q8_0 codes).
  const auto* k_cache = static_cast<const uint8_t*>(a.k_cache);
  const auto* v_cache = static_cast<const uint8_t*>(a.v_cache);
  const auto* k_scales = static_cast<const __half*>(a.k_scales);
  const auto* v_scales = static_cast<const __half*>(a.v_scales);

  // Positions [t0, t0 + kUnroll) of the run: those in [from, to) are loaded, those at or past
  // `end` are zeros (their scores are masked), the others are left as they are.
  Lanes k_raw[kUnroll], v_raw[kUnroll];
  __half k_scale[kUnroll], v_scale[kUnroll];  // Q8_0: this lane's block's scale
  auto load_run = [&](int t0, int from, int to) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int t = t0 + u;
      if (t >= from && t < to) {
        const int64_t block = block_table[t / a.block_size];
        const int64_t slot =
            ((block * a.block_size + t % a.block_size) * a.n_head_kv + kv_head) * D + lane * E;
        k_raw[u] = __ldg(reinterpret_cast<const Lanes*>(k_cache + slot * sizeof(Lanes) / E));
        v_raw[u] = __ldg(reinterpret_cast<const Lanes*>(v_cache + slot * sizeof(Lanes) / E));
        if constexpr (Q8) {
          k_scale[u] = k_scales[slot / kKvQ8Block];
          v_scale[u] = v_scales[slot / kKvQ8Block];
        }
      } else if (t >= end) {
        k_raw[u] = Lanes{};
        v_raw[u] = Lanes{};
        if constexpr (Q8) k_scale[u] = v_scale[u] = __half{};
      }
    }
  };
  // Positions below `settled` were written before this pass: the first run's loads of them go
  // out before the wait (the tile, positions and block table are staged by the host).
  const int settled = a.earlier_kv_settled ? min(end, ctx - 1) : start;
  int t0 = start + warp * kUnroll;
  load_run(t0, t0, settled);
  pdl_wait();
  load_run(t0, max(t0, settled), end);

  float q[G][E];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const float* qp =
        a.q + static_cast<int64_t>(row) * a.q_stride + (kv_head * G + g) * D + lane * E;
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

  for (; t0 < end; t0 += kWarps * kUnroll) {
    if (t0 >= start + kWarps * kUnroll) load_run(t0, t0, end);  // (the first run is loaded)
    // Q8_0: the codes as floats, each lane's score and value weights scaled by its block's
    // scale (kd, vd; 1 for f16).
    float k[kUnroll][E], v[kUnroll][E], kd[kUnroll], vd[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      lanes_to_float<E, Q8>(k_raw[u], k[u]);
      lanes_to_float<E, Q8>(v_raw[u], v[u]);
      kd[u] = Q8 ? __half2float(k_scale[u]) : 1.0f;
      vd[u] = Q8 ? __half2float(v_scale[u]) : 1.0f;
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float s[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < E; ++e) dot = fmaf(q[g][e], k[u][e], dot);
        s[u] = Q8 ? dot * kd[u] : dot;
      }
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) s[u] += __shfl_xor_sync(0xffffffffu, s[u], offset);
      }
      float m_new = m[g];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (t0 + u >= end) s[u] = -INFINITY;
        m_new = fmaxf(m_new, s[u]);
      }
      // Position t0 < end is visible: m_new is finite.
      const float alpha = __expf(m[g] - m_new);  // 0 while m[g] is -inf
      float p_sum = 0.0f;
      float p[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        p[u] = __expf(s[u] - m_new);
        p_sum += p[u];
      }
      l[g] = fmaf(l[g], alpha, p_sum);
      float pv[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) pv[u] = Q8 ? p[u] * vd[u] : p[u];
#pragma unroll
      for (int e = 0; e < E; ++e) {
        float sum = acc[g][e] * alpha;
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) sum = fmaf(pv[u], v[u][e], sum);
        acc[g][e] = sum;
      }
      m[g] = m_new;
    }
  }

  // The four warps' (max, sum, P·V) per query head into one.
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
  const int64_t acc_floats = a.n_batch_rows * a.n_head * a.n_splits * D;
  // G * D is a multiple of 64: each warp's 32 consecutive indices are 32 dims of one head
  // (one 8-bit block for quantize_q8_warp), and the loop is warp-uniform.
  for (int i = threadIdx.x; i < G * D; i += kThreads) {
    const int g = i / D;
    const int d = i % D;
    float m_max = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m_max = fmaxf(m_max, m_s[w][g]);
    float num = 0.0f, den = 0.0f;
    if (m_max != -INFINITY) {  // else an empty split: nothing visible
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float scale = __expf(m_s[w][g] - m_max);
        num = fmaf(scale, acc_s[w][g][d], num);
        den = fmaf(scale, l_s[w][g], den);
      }
    }
    const int head = kv_head * G + g;
    if (row_splits == 1) {
      const float o = num / den;
      a.out[static_cast<int64_t>(row) * a.out_stride + head * D + d] = o;
      if (a.out_q.qs != nullptr) {
        quantize_q8_warp(o, lane, a.out_q.qs + row * a.out_q.qs_stride + head * D + (d & ~31),
                         a.out_q.ds + row * a.out_q.ds_stride + (head * D + d) / kQ8Block);
      }
    } else {
      const int64_t part = (static_cast<int64_t>(row) * a.n_head + head) * a.n_splits + split;
      a.partial[part * D + d] = num;
      if (d == 0) {
        a.partial[acc_floats + 2 * part] = m_max;
        a.partial[acc_floats + 2 * part + 1] = den;
      }
    }
  }
  if (row_splits == 1 || a.split_counters == nullptr) return;

  // The last split's block of this (row, KV head) combines the splits: every block fences its
  // partials before it counts itself, the last one fences after (the fence-and-counter pattern).
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned int* counter = a.split_counters + static_cast<int64_t>(row) * a.n_head_kv + kv_head;
    last = atomicAdd(counter, 1u) == static_cast<unsigned int>(row_splits - 1);
    if (last) *counter = 0;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int i = threadIdx.x; i < G * D; i += kThreads) {
    const int head = kv_head * G + i / D;
    const int d = i % D;
    const float o = combine_attention_splits<D>(a, row, head, d, row_splits);
    a.out[static_cast<int64_t>(row) * a.out_stride + head * D + d] = o;
    if (a.out_q.qs != nullptr) {
      quantize_q8_warp(o, lane, a.out_q.qs + row * a.out_q.qs_stride + head * D + (d & ~31),
                       a.out_q.ds + row * a.out_q.ds_stride + (head * D + d) / kQ8Block);
    }
  }
}

template <int D, int G, bool Q8>
Status launch_group(const AttentionArgs& a, LaunchStream stream) {
  const int z = a.split_tiles ? 1 : a.n_splits;  // split tiles: a block per tile and KV head
  const dim3 grid(static_cast<unsigned>(a.n_tiles), static_cast<unsigned>(a.n_head_kv),
                  static_cast<unsigned>(z));
  int warps = a.decode_warps;
  if (warps == 0) {
    const int64_t blocks = static_cast<int64_t>(a.n_tiles) * a.n_head_kv * z;
    warps = G <= kMaxManyWarpsGroup && blocks < 4 * static_cast<int64_t>(current_device_sm_count())
                ? kManyWarps
                : kFewWarps;
  }
  if constexpr (G <= kMaxManyWarpsGroup) {
    if (warps == kManyWarps) {
      LS_CUDA_CHECK(launch_kernel(attention_decode_kernel<D, G, kManyWarps, Q8>, grid,
                                  32 * kManyWarps, 0, stream, a));
      return Status::ok();
    }
  }
  if (warps != kFewWarps) {
    return make_error(StatusCode::kInvalidArgument,
                      "attention: the decode kernel runs 4 warps per block, or 16 for up to {} "
                      "query heads per KV head; not {} for {}",
                      kMaxManyWarpsGroup, warps, G);
  }
  LS_CUDA_CHECK(launch_kernel(attention_decode_kernel<D, G, kFewWarps, Q8>, grid, 32 * kFewWarps, 0,
                              stream, a));
  return Status::ok();
}

template <int D, bool Q8>
Status launch_cache_type(const AttentionArgs& a, LaunchStream stream) {
  switch (a.n_head / a.n_head_kv) {
    case 1: return launch_group<D, 1, Q8>(a, stream);
    case 2: return launch_group<D, 2, Q8>(a, stream);
    case 3: return launch_group<D, 3, Q8>(a, stream);
    case 4: return launch_group<D, 4, Q8>(a, stream);
    case 5: return launch_group<D, 5, Q8>(a, stream);
    case 6: return launch_group<D, 6, Q8>(a, stream);
    case 7: return launch_group<D, 7, Q8>(a, stream);
    case 8: return launch_group<D, 8, Q8>(a, stream);
    default:
      return make_error(StatusCode::kInvalidArgument,
                        "attention: the decode kernel handles up to {} query heads per KV head, "
                        "not {}",
                        kMaxDecodeGroup, a.n_head / a.n_head_kv);
  }
}

}  // namespace

template <int D>
Status launch_attention_decode(const AttentionArgs& a, LaunchStream stream) {
  return a.kv_type == KvType::kQ8_0 ? launch_cache_type<D, true>(a, stream)
                                    : launch_cache_type<D, false>(a, stream);
}

template Status launch_attention_decode<64>(const AttentionArgs&, LaunchStream);
template Status launch_attention_decode<128>(const AttentionArgs&, LaunchStream);

}  // namespace llamaserve::cuda
