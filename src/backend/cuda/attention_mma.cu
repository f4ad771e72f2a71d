// Causal attention of prefill tiles on tensor cores (FlashAttention-2 style), over the paged f16
// KV cache described in attention.h.
//
// A block owns one (tile, KV head, split): the tile's query vectors (tile rows × query heads of the
// KV head, query vector qi = row * group + head_in_group, at most kMaxAttentionQueries) in four
// warps of sixteen. Per chunk of kChunk positions the block gathers the K and V rows from the
// cache into shared memory with cp.async (double buffered: chunk c + 1 loads while chunk c is
// computed), and each warp, for its sixteen query vectors:
//   S = Q · Kᵀ     mma.m16n8k16, Q (f16, pre-scaled by scale · log2 e) in registers for the whole
//                  loop, K fragments from shared memory with ldmatrix; S in fp32 registers;
//   mask           position t > the query vector's own position -> -inf;
//   softmax        running max and sum per query vector in registers (base 2: ex2), the
//                  accumulator rescaled when the max grows;
//   O += P · V     P rounded to f16 straight from the S registers (the C fragment of S is the A
//                  fragment of P), V fragments with ldmatrix.trans; O in fp32 registers.
// A Q8_0 cache (kv_q8.cuh) is staged in f16 all the same: each thread loads its pieces of the
// next chunk (16 codes and their scale) into registers before the current chunk's mma's, and
// converts and stores them after, so that the loads fly while the tensor cores work.
// At the end O / l goes to `out` (row r, head h at out + r * out_stride + h * head_dim); with
// several splits (a short chunk after a long cached context: few tiles, many positions) each
// split covers its share of the chunks and O, l and the max go to the partials that the
// reduction kernel combines (attention.h).
//
// Fragment layouts: mma.cuh.
// ldmatrix.m8n8.x4 (b16): lanes 8i .. 8i + 7 give the addresses of rows 0..7 of matrix i, and
// register i of every lane receives matrix i's row g, elements 2c and 2c + 1; with .trans it
// receives column g, elements of rows 2c and 2c + 1. Hence:
//   Q (rows = query vectors, columns = dims) loads as A: matrix 0 = rows 0-7, dims 0-7; 1 = rows
//     8-15, dims 0-7; 2 = rows 0-7, dims 8-15; 3 = rows 8-15, dims 8-15.
//   K (rows = positions, columns = dims) loads without .trans as B of S = Q · Kᵀ (B[k = dim][n =
//     position] = K[position][dim]: thread gets K[g][2c, 2c + 1] = b[0]): matrices 0, 1 = positions
//     0-7 with dims 0-7, 8-15 (b[0], b[1] of the first n8 tile), 2, 3 = positions 8-15 (the
//     second n8 tile).
//   V (rows = positions, columns = dims) loads with .trans as B of O = P · V (B[k = position][n =
//     dim] = V[position][dim]: thread gets V[2c, 2c + 1][g] = b[0]): matrices 0, 1 = dims 0-7 with
//     positions 0-7, 8-15 (b[0], b[1] of the first n8 tile of dims), 2, 3 = dims 8-15.
//   P: the C fragments of S for positions [16k, 16k + 8) and [16k + 8, 16k + 16) are, packed to
//     f16 pairs, a[0], a[1] and a[2], a[3] of P's A fragment for the k-step of those positions.
#include <climits>
#include <cmath>
#include <cstdint>

#include <cuda_fp16.h>

#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/attention.h"
#include "backend/cuda/attention_mma.h"
#include "backend/cuda/check.h"
#include "backend/cuda/kv_q8.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma.cuh"

namespace llamaserve::cuda {
namespace {

constexpr int kRowsPerWarp = 16;  // the M of mma.m16n8k16
constexpr int kWarps = kMaxAttentionQueries / kRowsPerWarp;
constexpr int kThreads = 32 * kWarps;
constexpr int kChunk = 64;  // positions per K/V chunk
static_assert(kMaxAttentionQueries % kRowsPerWarp == 0 && kChunk % 16 == 0);
static_assert(kMinTensorCoreQueries == kRowsPerWarp);

// Shared memory, f16: Q [kMaxAttentionQueries][kRow], then K [2][kChunk][kRow] and V [2][kChunk]
// [kRow] (two buffers each). A row is head_dim values plus 16 bytes of padding: the eight rows of
// one ldmatrix matrix then start 16 bytes apart modulo 128 and hit distinct banks (unpadded,
// rows 128 or 256 bytes apart would all hit the same four). Every offset is a multiple of 16
// bytes, as cp.async and ldmatrix need.
template <int D>
struct MmaSmem {
  static constexpr int kRow = D + 8;
  static constexpr int kQHalves = kMaxAttentionQueries * kRow;
  static constexpr int kChunkHalves = kChunk * kRow;  // one K or V buffer
  static constexpr int kBytes = (kQHalves + 4 * kChunkHalves) * 2;
  static_assert((kRow * 2) % 128 == 16);
};

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const __half* row_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row_address))
               : "memory");
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const __half* row_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row_address))
               : "memory");
}

// See the top of the file and attention.h.
// PRECONDITIONS (checked by the launcher and attention()): n_splits == 1; tile.n_rows * group <=
// kMaxAttentionQueries; a tile's rows have consecutive positions (the last row's is the largest);
// q 16-byte aligned with q_stride % 4 == 0; out 8-byte aligned with out_stride % 2 == 0.
template <int D, bool Q8>
__global__ void __launch_bounds__(kThreads) attention_mma_kernel(const AttentionArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  using Smem = MmaSmem<D>;
  constexpr int kRow = Smem::kRow;
  extern __shared__ uint4 attention_mma_smem[];
  __half* q_s = reinterpret_cast<__half*>(attention_mma_smem);  // [kMaxAttentionQueries][kRow]
  __half* k_s = q_s + Smem::kQHalves;                           // [2][kChunk][kRow]
  __half* v_s = k_s + 2 * Smem::kChunkHalves;                   // [2][kChunk][kRow]

  const int group_size = a.n_head / a.n_head_kv;
  // Later tiles of a sequence have longer contexts: blocks start with them, so that the short
  // ones fill the tail of the grid instead of the long ones.
  const AttentionTile tile = a.tiles[gridDim.x - 1 - blockIdx.x];
  const int kv_head = blockIdx.y;
  const int nq = tile.n_rows * group_size;
  const int tid = threadIdx.x;
  const int lane = tid & 31, warp = tid >> 5;
  const int seq = a.seq_index[tile.first_row];
  const int ctx = a.positions[tile.first_row + tile.n_rows - 1] + 1;
  const int32_t* block_table = a.block_tables + static_cast<int64_t>(seq) * a.blocks_per_seq;
  // Flash decoding: split blockIdx.z takes its share of the context's chunks (possibly none).
  const int split = blockIdx.z;
  const int total_chunks = (ctx + kChunk - 1) / kChunk;
  const int chunks_per_split = (total_chunks + a.n_splits - 1) / a.n_splits;
  const int chunk_begin = split * chunks_per_split;
  const int chunk_end = min(total_chunks, chunk_begin + chunks_per_split);

  // Chunk loads: thread tid copies 16-byte piece tid % kPieces of rows tid / kPieces + k *
  // kRowStep. Positions past ctx (the last chunk's tail) are zeros: their scores are masked, and
  // P = 0 times a zero V row stays 0 (garbage could be an f16 NaN or inf).
  constexpr int kPieces = D / 8;
  constexpr int kRowStep = kThreads / kPieces;
  static_assert(kThreads % kPieces == 0 && kChunk % kRowStep == 0);
  const int piece = tid % kPieces;
  const int first_chunk_row = tid / kPieces;
  auto load_chunk = [&](int chunk, int buffer) {
    int t = chunk * kChunk + first_chunk_row;
    int logical_block = t / a.block_size;
    int in_block = t - logical_block * a.block_size;
    __half* k_dst = k_s + buffer * Smem::kChunkHalves + first_chunk_row * kRow + piece * 8;
    __half* v_dst = v_s + buffer * Smem::kChunkHalves + first_chunk_row * kRow + piece * 8;
#pragma unroll
    for (int k = 0; k < kChunk / kRowStep; ++k) {
      const int offset = k * kRowStep * kRow;
      if (t < ctx) {
        const int64_t block = block_table[logical_block];
        const int64_t slot =
            ((block * a.block_size + in_block) * a.n_head_kv + kv_head) * D + piece * 8;
        cp_async_16(k_dst + offset, static_cast<const __half*>(a.k_cache) + slot);
        cp_async_16(v_dst + offset, static_cast<const __half*>(a.v_cache) + slot);
      } else {
        *reinterpret_cast<uint4*>(k_dst + offset) = make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint4*>(v_dst + offset) = make_uint4(0, 0, 0, 0);
      }
      t += kRowStep;
      in_block += kRowStep;
      while (in_block >= a.block_size) {
        in_block -= a.block_size;
        ++logical_block;
      }
    }
    cp_async_commit();  // one group per chunk and thread, empty or not
  };

  // Q8_0: thread tid converts 16-code piece tid % kQ8Pieces of rows tid / kQ8Pieces + k *
  // kQ8RowStep; `next` holds a chunk's pieces between their loads and their stores.
  constexpr int kQ8Pieces = D / 16;
  constexpr int kQ8RowStep = kThreads / kQ8Pieces;
  constexpr int kQ8Rows = kChunk / kQ8RowStep;
  static_assert(kThreads % kQ8Pieces == 0 && kChunk % kQ8RowStep == 0);
  const int q8_piece = tid % kQ8Pieces;
  const int q8_first_row = tid / kQ8Pieces;
  struct Q8Pieces {
    uint4 k[kQ8Rows], v[kQ8Rows];
    float k_scale[kQ8Rows], v_scale[kQ8Rows];
  } next;
  auto fetch_chunk_q8 = [&](int chunk) {
    int t = chunk * kChunk + q8_first_row;
    int logical_block = t / a.block_size;
    int in_block = t - logical_block * a.block_size;
#pragma unroll
    for (int k = 0; k < kQ8Rows; ++k) {
      if (t < ctx) {
        const int64_t block = block_table[logical_block];
        const int64_t first =
            ((block * a.block_size + in_block) * a.n_head_kv + kv_head) * D + q8_piece * 16;
        next.k[k] =
            __ldcg(reinterpret_cast<const uint4*>(static_cast<const int8_t*>(a.k_cache) + first));
        next.v[k] =
            __ldcg(reinterpret_cast<const uint4*>(static_cast<const int8_t*>(a.v_cache) + first));
        next.k_scale[k] = __half2float(static_cast<const __half*>(a.k_scales)[first / kKvQ8Block]);
        next.v_scale[k] = __half2float(static_cast<const __half*>(a.v_scales)[first / kKvQ8Block]);
      } else {
        next.k[k] = next.v[k] = make_uint4(0, 0, 0, 0);
        next.k_scale[k] = next.v_scale[k] = 0.0f;
      }
      t += kQ8RowStep;
      in_block += kQ8RowStep;
      while (in_block >= a.block_size) {
        in_block -= a.block_size;
        ++logical_block;
      }
    }
  };
  auto store_chunk_q8 = [&](int buffer) {
#pragma unroll
    for (int k = 0; k < kQ8Rows; ++k) {
      const int offset =
          buffer * Smem::kChunkHalves + (q8_first_row + k * kQ8RowStep) * kRow + q8_piece * 16;
      auto* k_dst = reinterpret_cast<uint4*>(k_s + offset);
      auto* v_dst = reinterpret_cast<uint4*>(v_s + offset);
      k_dst[0] = kv_codes_to_half8(next.k[k].x, next.k[k].y, next.k_scale[k]);
      k_dst[1] = kv_codes_to_half8(next.k[k].z, next.k[k].w, next.k_scale[k]);
      v_dst[0] = kv_codes_to_half8(next.v[k].x, next.v[k].y, next.v_scale[k]);
      v_dst[1] = kv_codes_to_half8(next.v[k].z, next.v[k].w, next.v_scale[k]);
    }
  };
  if (chunk_begin < chunk_end) {
    if constexpr (Q8) {
      fetch_chunk_q8(chunk_begin);
      store_chunk_q8(0);  // (visible after the barrier below that publishes Q)
    } else {
      load_chunk(chunk_begin, 0);
    }
  }

  // Q: f16, pre-scaled so that scores come out in base 2; rows nq.. are zeros (finite scores
  // for the padding query vectors, whose output is never written).
  const float q_scale = a.scale * 1.4426950408889634f;  // log2(e)
  for (int i = tid; i < kMaxAttentionQueries * (D / 4); i += kThreads) {
    const int qi = i / (D / 4), d = (i % (D / 4)) * 4;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (qi < nq) {
      const int64_t row = tile.first_row + qi / group_size;
      const int head = kv_head * group_size + qi % group_size;
      v = *reinterpret_cast<const float4*>(a.q + row * a.q_stride + head * D + d);
    }
    const uint2 h = make_uint2(pack_half2(v.x * q_scale, v.y * q_scale),
                               pack_half2(v.z * q_scale, v.w * q_scale));
    *reinterpret_cast<uint2*>(q_s + qi * kRow + d) = h;
  }

  // This thread's two query vectors of the warp's sixteen: C rows g and g + 8.
  const int g = lane >> 2, c = lane & 3;
  const int qi_lo = warp * kRowsPerWarp + g, qi_hi = qi_lo + 8;
  const bool valid_lo = qi_lo < nq, valid_hi = qi_hi < nq;
  // Padding query vectors are never masked (INT_MAX): nothing of theirs is written.
  const int qpos_lo = valid_lo ? a.positions[tile.first_row + qi_lo / group_size] : INT_MAX;
  const int qpos_hi = valid_hi ? a.positions[tile.first_row + qi_hi / group_size] : INT_MAX;
  // The largest and smallest position of the warp's query vectors: chunks after the largest are
  // skipped (-1: the warp has none and only loads), chunks up to the smallest need no mask.
  int warp_last = max(valid_lo ? qpos_lo : -1, valid_hi ? qpos_hi : -1);
  int warp_first = min(qpos_lo, qpos_hi);
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    warp_last = max(warp_last, __shfl_xor_sync(0xffffffffu, warp_last, offset));
    warp_first = min(warp_first, __shfl_xor_sync(0xffffffffu, warp_first, offset));
  }

  __syncthreads();             // Q in shared memory
  uint32_t q_frag[D / 16][4];  // A fragments, k-step kk = dims [16 kk, 16 kk + 16)
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    ldmatrix_x4(q_frag[kk],
                q_s + (warp * kRowsPerWarp + (lane & 15)) * kRow + 16 * kk + (lane >> 4) * 8);
  }

  float o[D / 8][4];  // C fragments, n8 tile j = dims [8 j, 8 j + 8)
#pragma unroll
  for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float m_lo = -INFINITY, m_hi = -INFINITY;  // running max (base 2), whole quad agrees
  float l_lo = 0.0f, l_hi = 0.0f;            // running sum of this thread's columns only

  for (int chunk = chunk_begin; chunk < chunk_end; ++chunk) {
    const int buffer = (chunk - chunk_begin) & 1;
    const bool more = chunk + 1 < chunk_end;
    if constexpr (Q8) {
      if (more) fetch_chunk_q8(chunk + 1);  // stored in the other buffer after the mma's
    } else if (more) {
      // The other buffer was last read in the previous iteration, before its closing barrier.
      load_chunk(chunk + 1, buffer ^ 1);
      cp_async_wait<1>();  // this chunk's group done, the next one may still fly
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // every thread's copies (and zero fills) of this chunk visible

    const int c0 = chunk * kChunk;
    if (c0 <= warp_last) {  // warp-uniform: chunks wholly after the warp's positions are skipped
      const __half* k_chunk = k_s + buffer * Smem::kChunkHalves;
      const __half* v_chunk = v_s + buffer * Smem::kChunkHalves;

      // S = Q · Kᵀ: n8 tile j = positions [c0 + 8 j, c0 + 8 j + 8).
      float s[kChunk / 8][4];
#pragma unroll
      for (int j = 0; j < kChunk / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
        for (int pj = 0; pj < kChunk / 16; ++pj) {
          // Matrix lane / 8: positions 16 pj + (0 | 8), dims 16 kk + (0 | 8).
          uint32_t b[4];
          ldmatrix_x4(b, k_chunk + (16 * pj + (lane & 7) + ((lane >> 4) << 3)) * kRow + 16 * kk +
                             ((lane >> 3) & 1) * 8);
          mma_16816(s[2 * pj], q_frag[kk], b[0], b[1]);
          mma_16816(s[2 * pj + 1], q_frag[kk], b[2], b[3]);
        }
      }

      // Causal mask: position t is visible to a query vector at position >= t. Positions past
      // ctx come after every query vector's position, so this masks them too.
      if (c0 + kChunk - 1 > warp_first) {
#pragma unroll
        for (int j = 0; j < kChunk / 8; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int t = c0 + 8 * j + 2 * c + e;
            if (t > qpos_lo) s[j][e] = -INFINITY;
            if (t > qpos_hi) s[j][2 + e] = -INFINITY;
          }
        }
      }

      // Online softmax. Row max over the thread's columns, then over the quad (lanes 4g .. 4g
      // + 3 hold the row's kChunk columns, two per n8 tile each).
      float max_lo = m_lo, max_hi = m_hi;
#pragma unroll
      for (int j = 0; j < kChunk / 8; ++j) {
        max_lo = fmaxf(max_lo, fmaxf(s[j][0], s[j][1]));
        max_hi = fmaxf(max_hi, fmaxf(s[j][2], s[j][3]));
      }
#pragma unroll
      for (int offset = 1; offset < 4; offset <<= 1) {
        max_lo = fmaxf(max_lo, __shfl_xor_sync(0xffffffffu, max_lo, offset));
        max_hi = fmaxf(max_hi, __shfl_xor_sync(0xffffffffu, max_hi, offset));
      }
      // A max still -inf (a query vector that has seen nothing visible: only possible for one
      // without positions, never for a real one since position 0 is visible to all) subtracts
      // 0 instead, so that probabilities are 2^-inf = 0 and not NaN.
      const float base_lo = max_lo == -INFINITY ? 0.0f : max_lo;
      const float base_hi = max_hi == -INFINITY ? 0.0f : max_hi;
      const float alpha_lo = exp2_approx(m_lo - base_lo);  // 0 while m is -inf
      const float alpha_hi = exp2_approx(m_hi - base_hi);
      m_lo = max_lo;
      m_hi = max_hi;
      float sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
      for (int j = 0; j < kChunk / 8; ++j) {
        s[j][0] = exp2_approx(s[j][0] - base_lo);
        s[j][1] = exp2_approx(s[j][1] - base_lo);
        s[j][2] = exp2_approx(s[j][2] - base_hi);
        s[j][3] = exp2_approx(s[j][3] - base_hi);
        sum_lo += s[j][0] + s[j][1];
        sum_hi += s[j][2] + s[j][3];
      }
      l_lo = l_lo * alpha_lo + sum_lo;
      l_hi = l_hi * alpha_hi + sum_hi;
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        o[j][0] *= alpha_lo;
        o[j][1] *= alpha_lo;
        o[j][2] *= alpha_hi;
        o[j][3] *= alpha_hi;
      }

      // O += P · V, k-step kk = positions [c0 + 16 kk, c0 + 16 kk + 16).
#pragma unroll
      for (int kk = 0; kk < kChunk / 16; ++kk) {
        const uint32_t p[4] = {pack_half2(s[2 * kk][0], s[2 * kk][1]),
                               pack_half2(s[2 * kk][2], s[2 * kk][3]),
                               pack_half2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                               pack_half2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
        for (int dj = 0; dj < D / 16; ++dj) {
          // Matrix lane / 8: positions 16 kk + (0 | 8), dims 16 dj + (0 | 8), transposed.
          uint32_t b[4];
          ldmatrix_x4_trans(b, v_chunk + (16 * kk + (lane & 7) + ((lane >> 3) & 1) * 8) * kRow +
                                   16 * dj + (lane >> 4) * 8);
          mma_16816(o[2 * dj], p, b[0], b[1]);
          mma_16816(o[2 * dj + 1], p, b[2], b[3]);
        }
      }
    }
    // The other buffer was last read in the previous iteration, before this one's first barrier.
    if constexpr (Q8) {
      if (more) store_chunk_q8(buffer ^ 1);
    }
    __syncthreads();  // every warp done with this buffer before the next iteration refills it
  }

  // The quad's partial sums make the row's.
#pragma unroll
  for (int offset = 1; offset < 4; offset <<= 1) {
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, offset);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, offset);
  }
  // half 0: C row g (o[j][0..1]), half 1: row g + 8 (o[j][2..3]). A real query vector sees at
  // least the position of the running max: l >= 1. With splits, the unnormalized sums go to
  // the partials (attention_splits.cuh), the max converted from base 2 to base e; a split with
  // nothing visible to a query vector leaves max -inf and sum 0, which the reduction skips.
  const int64_t acc_floats = a.n_batch_rows * a.n_head * a.n_splits * D;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int qi = half == 0 ? qi_lo : qi_hi;
    if (qi >= nq) continue;
    const int64_t row = tile.first_row + qi / group_size;
    const int head = kv_head * group_size + qi % group_size;
    if (a.n_splits > 1) {
      const int64_t part = (row * a.n_head + head) * a.n_splits + split;
      float* acc = a.partial + part * D + 2 * c;
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        *reinterpret_cast<float2*>(acc + 8 * j) = make_float2(o[j][2 * half], o[j][2 * half + 1]);
      }
      if (c == 0) {
        a.partial[acc_floats + 2 * part] = (half == 0 ? m_lo : m_hi) * 0.6931471805599453f;
        a.partial[acc_floats + 2 * part + 1] = half == 0 ? l_lo : l_hi;
      }
      continue;
    }
    float* dst = a.out + row * a.out_stride + head * D + 2 * c;
    const float inv_l = 1.0f / (half == 0 ? l_lo : l_hi);
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      *reinterpret_cast<float2*>(dst + 8 * j) =
          make_float2(o[j][2 * half] * inv_l, o[j][2 * half + 1] * inv_l);
    }
  }
}

}  // namespace

template <int D>
Status launch_attention_mma(const AttentionArgs& a, LaunchStream stream) {
  LS_CUDA_REQUIRE(a.head_dim == D && a.n_splits >= 1 && a.n_splits <= 65535);
  // One split writes `out` itself (never as 8-bit blocks); several write the partials.
  LS_CUDA_REQUIRE(a.n_splits == 1 ? a.out_q.qs == nullptr : a.partial != nullptr);
  LS_CUDA_REQUIRE(a.n_head_kv > 0 && a.n_head % a.n_head_kv == 0 && a.n_head_kv <= 65535);
  LS_CUDA_REQUIRE(a.max_tile_rows * (a.n_head / a.n_head_kv) <= kMaxAttentionQueries);
  LS_CUDA_REQUIRE(a.q_stride % 4 == 0 && a.out_stride % 2 == 0 && a.block_size > 0);
  if (a.n_tiles == 0) return Status::ok();
  LS_CUDA_REQUIRE(a.kv_type == KvType::kF16 || (a.k_scales != nullptr && a.v_scales != nullptr));
  const dim3 grid(static_cast<unsigned>(a.n_tiles), static_cast<unsigned>(a.n_head_kv),
                  static_cast<unsigned>(a.n_splits));
  const auto kernel =
      a.kv_type == KvType::kQ8_0 ? attention_mma_kernel<D, true> : attention_mma_kernel<D, false>;
  LS_CUDA_CHECK(
      launch_kernel(kernel, grid, kThreads, static_cast<size_t>(MmaSmem<D>::kBytes), stream, a));
  return Status::ok();
}

template Status launch_attention_mma<64>(const AttentionArgs& a, LaunchStream stream);
template Status launch_attention_mma<128>(const AttentionArgs& a, LaunchStream stream);

Status configure_attention_mma_kernels() {
  for (const auto kernel : {attention_mma_kernel<64, false>, attention_mma_kernel<64, true>}) {
    LS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       MmaSmem<64>::kBytes));
  }
  for (const auto kernel : {attention_mma_kernel<128, false>, attention_mma_kernel<128, true>}) {
    LS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       MmaSmem<128>::kBytes));
  }
  return Status::ok();
}

}  // namespace llamaserve::cuda
