// What the two decode kernels (attention_decode.cu on CUDA cores, attention_decode_mma.cu on tensor
// cores) share: a block's place (row, KV head, split and its positions), and its end, where
// the warps' partial results (a running max, a sum and the P·V sums of each query head) become
// the row's output or its split's partials, and the last split's block combines the splits.
#pragma once

#include <cmath>
#include <cstdint>

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/attention.h"
#include "backend/cuda/attention_splits.cuh"
#include "backend/cuda/half_rows.cuh"

namespace llamaserve::cuda {

// A register type of kBytes (4 or 8) bytes: one load of that width.
template <int kBytes>
struct WideWord;
template <>
struct WideWord<4> {
  using Type = uint32_t;
};
template <>
struct WideWord<8> {
  using Type = uint2;
};

// A decode launch's grid (x: tile, y: KV head, z: split unless the tiles are splits, as
// decode_block reads it) and its number of blocks.
struct DecodeGrid {
  dim3 grid;
  int64_t blocks;
};

inline DecodeGrid decode_grid(const AttentionArgs& a) {
  const int z = a.split_tiles ? 1 : a.n_splits;  // split tiles: a block per tile and KV head
  return {dim3(static_cast<unsigned>(a.n_tiles), static_cast<unsigned>(a.n_head_kv),
               static_cast<unsigned>(z)),
          static_cast<int64_t>(a.n_tiles) * a.n_head_kv * z};
}

// One block's (row, KV head, split) and the positions [start, end) of its split.
struct DecodeBlock {
  int row;
  int kv_head;
  int split;
  int row_splits;
  int ctx;  // the row's positions: [0, ctx)
  int start;
  int end;
};

// The block's place in the grid (x: tile, y: KV head, z: split unless the tiles are splits).
// A split's first position is a multiple of `align` (the last splits may then be empty).
template <int kAlign>
__device__ __forceinline__ DecodeBlock decode_block(const AttentionArgs& a) {
  const AttentionTile tile = a.tiles[blockIdx.x];
  DecodeBlock b;
  b.row = tile.first_row;
  b.kv_head = static_cast<int>(blockIdx.y);
  // A split tile is one split of its row's own count (AttentionArgs::split_tiles).
  b.split = tile.n_splits > 0 ? tile.split : static_cast<int>(blockIdx.z);
  b.row_splits = tile.n_splits > 0 ? tile.n_splits : a.n_splits;
  b.ctx = a.positions[b.row] + 1;
  const int per_split = (b.ctx + b.row_splits - 1) / b.row_splits;
  const int aligned = (per_split + kAlign - 1) / kAlign * kAlign;
  b.start = min(b.ctx, b.split * aligned);
  b.end = min(b.ctx, b.start + aligned);
  return b;
}

// The block's end. m_s, l_s and acc_s hold each warp's running max, sum and P·V sums per query
// head (of `group` <= kGroupCap; a warp that saw no position: max -inf, sum 0); warp w's sums of
// head g at acc_s + w * acc_warp_stride + g * D. The warps' results
// are combined per head; with one split they are the output (and its 8-bit blocks and halves,
// given out_q and out_half), else the split's partials, and with split counters the last split's
// block of the (row, KV head) combines the splits (the fence-and-counter pattern: every block
// fences its partials before it counts itself, the last one fences after). Every thread of the
// block calls it after a barrier that follows the writes of m_s, l_s and acc_s.
template <int D, int kWarps, int kGroupCap>
__device__ __forceinline__ void finish_decode_block(const AttentionArgs& a, const DecodeBlock& b,
                                                    int group,
                                                    const float (&m_s)[kWarps][kGroupCap],
                                                    const float (&l_s)[kWarps][kGroupCap],
                                                    const float* acc_s, int acc_warp_stride) {
  constexpr int kThreads = 32 * kWarps;
  const int lane = threadIdx.x & 31;
  const int64_t acc_floats = a.n_batch_rows * a.n_head * a.n_splits * D;
  // group * D is a multiple of 64: each warp's 32 consecutive indices are 32 dims of one head
  // (one 8-bit block for quantize_q8_warp), and the loop is warp-uniform.
  for (int i = threadIdx.x; i < group * D; i += kThreads) {
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
        num = fmaf(scale, acc_s[w * acc_warp_stride + g * D + d], num);
        den = fmaf(scale, l_s[w][g], den);
      }
    }
    const int head = b.kv_head * group + g;
    if (b.row_splits == 1) {
      const float o = num / den;
      a.out[static_cast<int64_t>(b.row) * a.out_stride + head * D + d] = o;
      if (a.out_half.data != nullptr) store_half(a.out_half, b.row, head * D + d, o);
      if (a.out_q.qs != nullptr) {
        quantize_q8_warp(o, lane, a.out_q.qs + b.row * a.out_q.qs_stride + head * D + (d & ~31),
                         a.out_q.ds + b.row * a.out_q.ds_stride + (head * D + d) / kQ8Block);
      }
    } else {
      const int64_t part = (static_cast<int64_t>(b.row) * a.n_head + head) * a.n_splits + b.split;
      a.partial[part * D + d] = num;
      if (d == 0) {
        a.partial[acc_floats + 2 * part] = m_max;
        a.partial[acc_floats + 2 * part + 1] = den;
      }
    }
  }
  if (b.row_splits == 1 || a.split_counters == nullptr) return;

  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned int* counter =
        a.split_counters + static_cast<int64_t>(b.row) * a.n_head_kv + b.kv_head;
    last = atomicAdd(counter, 1u) == static_cast<unsigned int>(b.row_splits - 1);
    if (last) *counter = 0;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int i = threadIdx.x; i < group * D; i += kThreads) {
    const int head = b.kv_head * group + i / D;
    const int d = i % D;
    const float o = combine_attention_splits<D>(a, b.row, head, d, b.row_splits);
    a.out[static_cast<int64_t>(b.row) * a.out_stride + head * D + d] = o;
    if (a.out_half.data != nullptr) store_half(a.out_half, b.row, head * D + d, o);
    if (a.out_q.qs != nullptr) {
      quantize_q8_warp(o, lane, a.out_q.qs + b.row * a.out_q.qs_stride + head * D + (d & ~31),
                       a.out_q.ds + b.row * a.out_q.ds_stride + (head * D + d) / kQ8Block);
    }
  }
}

}  // namespace llamaserve::cuda
