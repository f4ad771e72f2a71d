// Decode attention: one block per (row, KV head, split), four warps that each take every
// fourth run of kUnroll positions of the split. A warp reads a position's K and V rows whole
// (lane l holds dims [l E, l E + E), E = D / 32: one coalesced 128- or 256-byte row per load),
// with kUnroll positions' loads in flight at once, and the next run's loads issued before this
// run's arithmetic (decode attention over 256 x 640 positions at 95% of the copy bandwidth
// against 89% without); scores are warp sums (butterfly shuffles),
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
// With a Q8_0 cache half a warp reads a row (kRowLanes: a lane loads its E = D / 16 codes and
// its block's scale), the two halves two runs of positions; a lane converts the codes to floats
// and scales its part of a score and its value weights once (the arithmetic of the dequantized
// values, on half the bytes), and the halves combine their results at the end.
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
// Registers: 16 warps of wider groups do not fit an SM (with a Q8_0 cache's scales, of 4).
template <bool Q8>
constexpr int kMaxManyWarpsGroup = Q8 ? 3 : 4;
constexpr int kUnroll = 4;  // positions per warp per step, their loads in flight together

// Lanes that read one position's K or V row: the whole warp for f16 (E = D / 32 values a lane,
// 4 or 8 bytes), half a warp for Q8_0 codes (E = D / 16 codes a lane, 4 or 8 bytes; the two
// halves take different positions, so that a warp has as many bytes in flight as with f16).
template <bool Q8>
inline constexpr int kRowLanes = Q8 ? 16 : 32;

// One lane's E values: E halves, or E codes (with their block's scale loaded apart).
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
struct KvLanes<4, true> {
  using Raw = uint32_t;
};
template <>
struct KvLanes<8, true> {
  using Raw = uint2;
};

template <int E, bool Q8>
__device__ __forceinline__ void lanes_to_float(const typename KvLanes<E, Q8>::Raw& v,
                                               float (&f)[E]) {
  if constexpr (Q8) {
    const auto* words = reinterpret_cast<const uint32_t*>(&v);
#pragma unroll
    for (int i = 0; i < E; ++i) f[i] = kv_code(words[i / 4], i % 4);
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
  // A warp's R groups of kLanes lanes each take a run of kUnroll positions, R runs side by side.
  constexpr int kLanes = kRowLanes<Q8>;
  constexpr int R = 32 / kLanes;
  constexpr int E = D / kLanes;
  using Lanes = typename KvLanes<E, Q8>::Raw;
  __shared__ float m_s[kWarps][G];
  __shared__ float l_s[kWarps][G];
  __shared__ float acc_s[kWarps][G][D];

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int group = lane / kLanes;     // the warp's run this lane reads
  const int row_lane = lane % kLanes;  // its E values of the row
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

  // A run's registers: positions [t0, t0 + kUnroll) of K and V (and their Q8_0 scales).
  struct Run {
    Lanes k[kUnroll], v[kUnroll];
    __half k_scale[kUnroll], v_scale[kUnroll];  // Q8_0: this lane's block's scale
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
            ((block * a.block_size + t % a.block_size) * a.n_head_kv + kv_head) * D + row_lane * E;
        r.k[u] = __ldg(reinterpret_cast<const Lanes*>(k_cache + slot * sizeof(Lanes) / E));
        r.v[u] = __ldg(reinterpret_cast<const Lanes*>(v_cache + slot * sizeof(Lanes) / E));
        if constexpr (Q8) {
          r.k_scale[u] = __ldg(k_scales + slot / kKvQ8Block);
          r.v_scale[u] = __ldg(v_scales + slot / kKvQ8Block);
        }
      } else if (t >= end) {
        r.k[u] = Lanes{};
        r.v[u] = Lanes{};
        if constexpr (Q8) r.k_scale[u] = r.v_scale[u] = __half{};
      }
    }
  };
  // Positions below `settled` were written before this pass: the first run's loads of them go
  // out before the wait (the tile, positions and block table are staged by the host).
  const int settled = a.earlier_kv_settled ? min(end, ctx - 1) : start;
  // The warp's runs start at warp_t0 (the loop's bound: every lane of a warp takes the same
  // iterations, as the shuffles need), this lane's at t0.
  constexpr int kStride = kWarps * R * kUnroll;
  const int first_warp_t0 = start + warp * R * kUnroll;
  int t0 = first_warp_t0 + group * kUnroll;
  Run run;
  load_run(run, t0, t0, settled);
  pdl_wait();
  load_run(run, t0, max(t0, settled), end);

  float q[G][E];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const float* qp =
        a.q + static_cast<int64_t>(row) * a.q_stride + (kv_head * G + g) * D + row_lane * E;
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

  for (int warp_t0 = first_warp_t0; warp_t0 < end; warp_t0 += kStride, t0 += kStride) {
    // The next run's loads go out before this run's arithmetic.
    Run next;
    if (warp_t0 + kStride < end) load_run(next, t0 + kStride, t0 + kStride, end);
    // Scores, a position's K row converted once (Q8_0: each lane's part of a score scaled by
    // its block's scale).
    float s[G][kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float k[E];
      lanes_to_float<E, Q8>(run.k[u], k);
      const float kd = Q8 ? __half2float(run.k_scale[u]) : 1.0f;
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < E; ++e) dot = fmaf(q[g][e], k[e], dot);
        s[g][u] = Q8 ? dot * kd : dot;
      }
    }
#pragma unroll
    for (int offset = kLanes / 2; offset > 0; offset >>= 1) {
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
      // A run wholly past `end` (possible for all but the warp's first) with nothing seen
      // before keeps m_new at -inf: subtracting 0 instead keeps p = 0 and alpha finite.
      const float base = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = __expf(m[g] - base);  // 0 while m[g] is -inf
      float p_sum = 0.0f;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        s[g][u] = __expf(s[g][u] - base);
        p_sum += s[g][u];
      }
      l[g] = fmaf(l[g], alpha, p_sum);
      m[g] = m_new;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[g][e] *= alpha;
    }
    // P·V, a position's V row converted once (Q8_0: its weights scaled by the block's scale).
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float v[E];
      lanes_to_float<E, Q8>(run.v[u], v);
      const float vd = Q8 ? __half2float(run.v_scale[u]) : 1.0f;
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float pv = Q8 ? s[g][u] * vd : s[g][u];
#pragma unroll
        for (int e = 0; e < E; ++e) acc[g][e] = fmaf(pv, v[e], acc[g][e]);
      }
    }
    run = next;
  }

  // A warp's R runs' (max, sum, P·V) into one (runs that saw nothing: max -inf, sum 0).
#pragma unroll
  for (int offset = kLanes; offset < 32; offset <<= 1) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const float m_other = __shfl_xor_sync(0xffffffffu, m[g], offset);
      const float m_max = fmaxf(m[g], m_other);
      const float mine = m[g] == -INFINITY ? 0.0f : __expf(m[g] - m_max);
      const float theirs = m_other == -INFINITY ? 0.0f : __expf(m_other - m_max);
      l[g] = l[g] * mine + __shfl_xor_sync(0xffffffffu, l[g], offset) * theirs;
#pragma unroll
      for (int e = 0; e < E; ++e)
        acc[g][e] = acc[g][e] * mine + __shfl_xor_sync(0xffffffffu, acc[g][e], offset) * theirs;
      m[g] = m_max;
    }
  }
  // The warps' (max, sum, P·V) per query head into one.
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (lane == 0) {
      m_s[warp][g] = m[g];
      l_s[warp][g] = l[g];
    }
    if (group == 0) {
#pragma unroll
      for (int e = 0; e < E; ++e) acc_s[warp][g][row_lane * E + e] = acc[g][e];
    }
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
    warps =
        G <= kMaxManyWarpsGroup<Q8> && blocks < 4 * static_cast<int64_t>(current_device_sm_count())
            ? kManyWarps
            : kFewWarps;
  }
  if constexpr (G <= kMaxManyWarpsGroup<Q8>) {
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
                      kMaxManyWarpsGroup<Q8>, warps, G);
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
