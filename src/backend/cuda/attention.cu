#include <algorithm>
#include <cmath>

#include <cuda_fp16.h>
#include <cuda_pipeline.h>

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/attention.h"
#include "backend/cuda/attention_decode.h"
#include "backend/cuda/attention_mma.h"
#include "backend/cuda/attention_splits.cuh"
#include "backend/cuda/check.h"
#include "backend/cuda/kv_q8.cuh"
#include "backend/cuda/kv_slots.cuh"
#include "backend/cuda/launch.cuh"

namespace llamaserve::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kChunk = 128;  // positions per step: one per thread in the score phase
static_assert(kChunk == kThreads && kChunk % 32 == 0);

__device__ __forceinline__ int round_up8(int n) { return (n + 7) & ~7; }

// Shared memory of one block, for `nq` query vectors rounded up to 8 (the score loop reads
// query vectors in eights): queries, scores, softmax state, and the chunk's V rows. Sizes in
// bytes are multiples of 16, so every array stays aligned.
struct SmemLayout {
  __host__ __device__ static int64_t bytes(int nq8, int head_dim) {
    return static_cast<int64_t>(nq8) * head_dim * 4 + static_cast<int64_t>(nq8) * kChunk * 4 +
           4LL * nq8 * 4 + static_cast<int64_t>(kChunk) * head_dim * 2;
  }
};

__device__ __forceinline__ void half8_to_float(const uint4& v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}

// One position's K row in a thread's registers, read eight dims at a time as floats: f16
// values, or Q8_0 codes and their blocks' scales (kv_q8.cuh).
template <int D, bool Q8>
struct KRow;
template <int D>
struct KRow<D, false> {
  uint4 h[D / 8];
  __device__ __forceinline__ void load(const AttentionArgs& a, int64_t slot) {
#pragma unroll
    for (int i = 0; i < D / 8; ++i)
      h[i] =
          __ldg(reinterpret_cast<const uint4*>(static_cast<const __half*>(a.k_cache) + slot) + i);
  }
  __device__ __forceinline__ void eight(int i, float (&k)[8]) const { half8_to_float(h[i], k); }
};
template <int D>
struct KRow<D, true> {
  uint4 codes[D / 16];
  float scale[D / kKvQ8Block];
  __device__ __forceinline__ void load(const AttentionArgs& a, int64_t slot) {
#pragma unroll
    for (int i = 0; i < D / 16; ++i)
      codes[i] =
          __ldg(reinterpret_cast<const uint4*>(static_cast<const int8_t*>(a.k_cache) + slot) + i);
#pragma unroll
    for (int b = 0; b < D / kKvQ8Block; ++b)
      scale[b] = __half2float(static_cast<const __half*>(a.k_scales)[slot / kKvQ8Block + b]);
  }
  __device__ __forceinline__ void eight(int i, float (&k)[8]) const {
    const uint4& c = codes[i / 2];
    const uint32_t lo = i % 2 == 0 ? c.x : c.z, hi = i % 2 == 0 ? c.y : c.w;
    const float d = scale[(8 * i) / kKvQ8Block];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      k[e] = kv_code(lo, e) * d;
      k[4 + e] = kv_code(hi, e) * d;
    }
  }
};

// Phase 1 for one position: the scores of its K row (this thread's j-th position of the chunk,
// position t) against query vectors [q0, q0 + QN), causal mask applied. QN is exact (a decode
// row of a model without GQA has one query vector per KV head: no work for padding vectors).
template <int D, int QN, typename Row>
__device__ __forceinline__ void score_position(const Row& k_row, const float* q_s,
                                               const int* qpos_s, float* s_s, int q0, int j,
                                               int t) {
  float dot[QN] = {};
#pragma unroll
  for (int i = 0; i < D / 8; ++i) {
    float k[8];
    k_row.eight(i, k);
#pragma unroll
    for (int qq = 0; qq < QN; ++qq) {
      const float4* qv = reinterpret_cast<const float4*>(q_s + (q0 + qq) * D + 8 * i);
      const float4 lo = qv[0], hi = qv[1];
      dot[qq] = fmaf(lo.x, k[0], fmaf(lo.y, k[1], fmaf(lo.z, k[2], fmaf(lo.w, k[3], dot[qq]))));
      dot[qq] = fmaf(hi.x, k[4], fmaf(hi.y, k[5], fmaf(hi.z, k[6], fmaf(hi.w, k[7], dot[qq]))));
    }
  }
#pragma unroll
  for (int qq = 0; qq < QN; ++qq) {
    const int qi = q0 + qq;
    s_s[qi * kChunk + j] = t <= qpos_s[qi] ? dot[qq] : -INFINITY;
  }
}

// See attention.h. Phases per chunk of kChunk positions:
//   1. thread j loads the K and V rows of position j (32 16-byte loads in flight per thread
//      for head_dim 128), parks V in shared memory, and computes the scores of K against every
//      query vector (queries broadcast from shared memory, in eights and an exact remainder),
//      causal mask applied;
//   2. one warp per query vector: chunk max, running max/sum update, probabilities;
//   3. thread (pair p, group) accumulates dims 2p, 2p + 1 of P·V for the query vectors of its
//      group, V read from shared memory.
// With a Q8_0 cache a K row stays in registers as codes and scales, and the chunk's V rows go to
// shared memory as codes [kChunk][D] followed by scales [kChunk][D / 32]; both are converted to
// floats where they are used.
template <int D, bool Q8>
__global__ void __launch_bounds__(kThreads) attention_kernel(const AttentionArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  constexpr int kPairs = D / 2;
  constexpr int kGroups = kThreads / kPairs;  // 4 for D = 64, 2 for D = 128
  constexpr int kMaxPerThread = kMaxAttentionQueries / kGroups;
  extern __shared__ float4 smem[];

  const int group_size = a.n_head / a.n_head_kv;
  const AttentionTile tile = a.tiles[blockIdx.x];
  const int kv_head = blockIdx.y;
  const int split = blockIdx.z;
  const int nq = tile.n_rows * group_size;
  const int nq8 = round_up8(a.max_tile_rows * group_size);

  float* q_s = reinterpret_cast<float*>(smem);          // [nq8][D], pre-scaled
  float* s_s = q_s + nq8 * D;                           // [nq8][kChunk]: scores, then probabilities
  float* m_s = s_s + nq8 * kChunk;                      // running max per query vector
  float* l_s = m_s + nq8;                               // running sum
  float* alpha_s = l_s + nq8;                           // this chunk's rescale of the old sums
  int* qpos_s = reinterpret_cast<int*>(alpha_s + nq8);  // the query's position
  __half* v_s = reinterpret_cast<__half*>(qpos_s + nq8);  // [kChunk][D]: the chunk's V rows
  auto* v_codes_s = reinterpret_cast<int8_t*>(v_s);       // Q8_0: [kChunk][D] codes, then
  auto* v_scales_s = reinterpret_cast<__half*>(v_codes_s + kChunk * D);  // [kChunk][D / 32]

  const int tid = threadIdx.x;
  const int seq = a.seq_index[tile.first_row];
  const int ctx = a.positions[tile.first_row + tile.n_rows - 1] + 1;
  const int32_t* block_table = a.block_tables + static_cast<int64_t>(seq) * a.blocks_per_seq;
  const int total_chunks = (ctx + kChunk - 1) / kChunk;
  const int chunks_per_split = (total_chunks + a.n_splits - 1) / a.n_splits;
  const int start = split * chunks_per_split * kChunk;
  const int end = min(ctx, start + chunks_per_split * kChunk);

  for (int i = tid; i < nq * D; i += kThreads) {
    const int qi = i / D, d = i % D;
    const int r = qi / group_size, head = kv_head * group_size + qi % group_size;
    q_s[qi * D + d] = a.q[(tile.first_row + r) * a.q_stride + head * D + d] * a.scale;
  }
  for (int qi = tid; qi < nq8; qi += kThreads) {
    m_s[qi] = -INFINITY;
    l_s[qi] = 0.0f;
    qpos_s[qi] = qi < nq ? a.positions[tile.first_row + qi / group_size] : -1;
  }
  auto slot_of = [&](int t) {
    const int64_t block = block_table[t / a.block_size];
    return ((block * a.block_size + t % a.block_size) * a.n_head_kv + kv_head) * D;
  };

  const int pair = tid % kPairs;
  const int group = tid / kPairs;
  // Phase 3 gives each group of kPairs threads query vectors group, group + kGroups, ...; with
  // fewer query vectors than groups (decode rows of a model without GQA have one per KV head)
  // the groups of one query vector split its positions instead (in `phases`, combined at the
  // end), so that no group idles. Groups are whole warps, so a phase is warp-uniform.
  const int phases = nq >= kGroups ? 1 : kGroups / nq;
  const int slots = kGroups / phases;  // query vectors in parallel
  const int slot = group % slots;
  const int phase = group / slots;
  float acc[kMaxPerThread][2];
#pragma unroll
  for (int i = 0; i < kMaxPerThread; ++i) acc[i][0] = acc[i][1] = 0.0f;
  __syncthreads();

  for (int c0 = start; c0 < end; c0 += kChunk) {
    const int n_in_chunk = min(kChunk, end - c0);
    // Phase 1: scores.
    {
      const int j = tid;
      uint4* v_row_s =
          Q8 ? reinterpret_cast<uint4*>(v_codes_s + j * D) : reinterpret_cast<uint4*>(v_s + j * D);
      constexpr int kRowPieces = Q8 ? D / 16 : D / 8;  // 16-byte pieces of a V row
      if (j < n_in_chunk) {
        const int t = c0 + j;
        const int64_t slot = slot_of(t);
        // V goes straight to shared memory (cp.async: no registers held while in flight).
        const auto* v_row = reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(a.v_cache) +
                                                           slot * (Q8 ? 1 : 2));
#pragma unroll
        for (int i = 0; i < kRowPieces; ++i)
          __pipeline_memcpy_async(v_row_s + i, v_row + i, sizeof(uint4));
        if constexpr (Q8) {
          __pipeline_memcpy_async(v_scales_s + j * (D / kKvQ8Block),
                                  static_cast<const __half*>(a.v_scales) + slot / kKvQ8Block,
                                  D / kKvQ8Block * sizeof(__half));
        }
        __pipeline_commit();
        KRow<D, Q8> k_row;
        k_row.load(a, slot);
        for (int q0 = 0; q0 < nq; q0 += 8) {
          switch (min(8, nq - q0)) {
            case 1: score_position<D, 1>(k_row, q_s, qpos_s, s_s, q0, j, t); break;
            case 2: score_position<D, 2>(k_row, q_s, qpos_s, s_s, q0, j, t); break;
            case 3: score_position<D, 3>(k_row, q_s, qpos_s, s_s, q0, j, t); break;
            case 4: score_position<D, 4>(k_row, q_s, qpos_s, s_s, q0, j, t); break;
            case 5: score_position<D, 5>(k_row, q_s, qpos_s, s_s, q0, j, t); break;
            case 6: score_position<D, 6>(k_row, q_s, qpos_s, s_s, q0, j, t); break;
            case 7: score_position<D, 7>(k_row, q_s, qpos_s, s_s, q0, j, t); break;
            default: score_position<D, 8>(k_row, q_s, qpos_s, s_s, q0, j, t); break;
          }
        }
      } else {
        // Past the split's end: masked, with zeros for phase 3 to multiply by p = 0.
#pragma unroll
        for (int i = 0; i < kRowPieces; ++i) v_row_s[i] = make_uint4(0, 0, 0, 0);
        if constexpr (Q8) {
#pragma unroll
          for (int b = 0; b < D / kKvQ8Block; ++b) v_scales_s[j * (D / kKvQ8Block) + b] = __half{};
        }
        for (int qi = 0; qi < nq; ++qi) s_s[qi * kChunk + j] = -INFINITY;
      }
      __pipeline_wait_prior(0);  // this thread's V copies; the barrier publishes them
    }
    __syncthreads();

    // Phase 2: online softmax update, one warp per query vector.
    {
      const int lane = tid & 31, warp = tid >> 5;
      for (int qi = warp; qi < nq; qi += kThreads / 32) {
        float4* row = reinterpret_cast<float4*>(s_s + qi * kChunk) + lane;
        float4 s = *row;
        float chunk_max = fmaxf(fmaxf(s.x, s.y), fmaxf(s.z, s.w));
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) {
          chunk_max = fmaxf(chunk_max, __shfl_xor_sync(0xffffffffu, chunk_max, offset));
        }
        const float m_old = m_s[qi];
        const float m_new = fmaxf(m_old, chunk_max);
        float alpha = 1.0f;
        if (m_new == -INFINITY) {
          s = make_float4(0.0f, 0.0f, 0.0f, 0.0f);  // nothing visible yet
        } else {
          alpha = __expf(m_old - m_new);  // 0 while m_old is -inf
          s = make_float4(__expf(s.x - m_new), __expf(s.y - m_new), __expf(s.z - m_new),
                          __expf(s.w - m_new));
        }
        *row = s;
        float sum = (s.x + s.y) + (s.z + s.w);
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1)
          sum += __shfl_xor_sync(0xffffffffu, sum, offset);
        // Every lane has read m_s[qi] and l_s[qi] before lane 0 replaces them.
        __syncwarp();
        if (lane == 0) {
          m_s[qi] = m_new;
          l_s[qi] = l_s[qi] * alpha + sum;
          alpha_s[qi] = alpha;
        }
      }
    }
    __syncthreads();

    // Phase 3: acc = acc * alpha + P · V over this thread's phase of the positions, in fours.
    // The loops over this thread's query vectors stop at nq (break, not predication: decode
    // has only a few).
#pragma unroll
    for (int i = 0; i < kMaxPerThread; ++i) {
      const int qi = slot + i * slots;
      if (qi >= nq) break;
      acc[i][0] *= alpha_s[qi];
      acc[i][1] *= alpha_s[qi];
    }
    const int n_padded = (n_in_chunk + 3) & ~3;
    for (int j = 4 * phase; j < n_padded; j += 4 * phases) {
      float2 v[4];
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        if constexpr (Q8) {
          const int8_t* c = v_codes_s + (j + jj) * D + 2 * pair;
          const float d =
              __half2float(v_scales_s[(j + jj) * (D / kKvQ8Block) + (2 * pair) / kKvQ8Block]);
          v[jj] = make_float2(static_cast<float>(c[0]) * d, static_cast<float>(c[1]) * d);
        } else {
          v[jj] = __half22float2(*reinterpret_cast<const __half2*>(v_s + (j + jj) * D + 2 * pair));
        }
      }
#pragma unroll
      for (int i = 0; i < kMaxPerThread; ++i) {
        const int qi = slot + i * slots;
        if (qi >= nq) break;
        const float4 p = *reinterpret_cast<const float4*>(s_s + qi * kChunk + j);
        acc[i][0] =
            fmaf(p.x, v[0].x, fmaf(p.y, v[1].x, fmaf(p.z, v[2].x, fmaf(p.w, v[3].x, acc[i][0]))));
        acc[i][1] =
            fmaf(p.x, v[0].y, fmaf(p.y, v[1].y, fmaf(p.z, v[2].y, fmaf(p.w, v[3].y, acc[i][1]))));
      }
    }
    __syncthreads();
  }
  if (phases > 1) {
    // Phases 1.. hand their partial sums to phase 0 through the (now free) score buffer:
    // [phase][query vector][D] floats, at most kGroups * D <= 8 * kChunk.
    float* partial_s = s_s;
    if (phase > 0) {
#pragma unroll
      for (int i = 0; i < kMaxPerThread; ++i) {
        const int qi = slot + i * slots;
        if (qi >= nq) break;
        float* dst = partial_s + ((phase * nq) + qi) * D + 2 * pair;
        dst[0] = acc[i][0];
        dst[1] = acc[i][1];
      }
    }
    __syncthreads();
    if (phase > 0) return;
#pragma unroll
    for (int i = 0; i < kMaxPerThread; ++i) {
      const int qi = slot + i * slots;
      if (qi >= nq) break;
      for (int p = 1; p < phases; ++p) {
        const float* src = partial_s + ((p * nq) + qi) * D + 2 * pair;
        acc[i][0] += src[0];
        acc[i][1] += src[1];
      }
    }
  }

  const int64_t acc_floats = a.n_batch_rows * a.n_head * a.n_splits * D;
#pragma unroll
  for (int i = 0; i < kMaxPerThread; ++i) {
    const int qi = slot + i * slots;
    if (qi >= nq) continue;
    const int64_t row = tile.first_row + qi / group_size;
    const int head = kv_head * group_size + qi % group_size;
    if (a.n_splits == 1) {
      const float inv_l = 1.0f / l_s[qi];
      const float2 o = make_float2(acc[i][0] * inv_l, acc[i][1] * inv_l);
      *reinterpret_cast<float2*>(a.out + row * a.out_stride + head * D + 2 * pair) = o;
      // Half-warp h of a warp holds pairs [16 h', 16 h' + 16) of the head: one block.
      if (a.out_q.qs != nullptr) {
        quantize_q8_pairs(o, tid & 31,
                          a.out_q.qs + row * a.out_q.qs_stride + head * D + 32 * (pair / 16),
                          a.out_q.ds + row * a.out_q.ds_stride + (head * D) / kQ8Block + pair / 16);
      }
    } else {
      const int64_t part = (row * a.n_head + head) * a.n_splits + split;
      *reinterpret_cast<float2*>(a.partial + part * D + 2 * pair) =
          make_float2(acc[i][0], acc[i][1]);
      if (pair == 0) {
        a.partial[acc_floats + 2 * part] = m_s[qi];
        a.partial[acc_floats + 2 * part + 1] = l_s[qi];
      }
    }
  }
}

// Combines the splits of one (row, head) (attention_splits.cuh).
template <int D>
__global__ void __launch_bounds__(D) attention_reduce_kernel(const AttentionArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t row = a.reduce_first_row + blockIdx.x;
  const int head = blockIdx.y;
  const int d = threadIdx.x;
  const float o = combine_attention_splits<D>(a, row, head, d, a.n_splits);
  a.out[row * a.out_stride + head * D + d] = o;
  // Warp w holds dims [32 w, 32 w + 32) of the head: one block.
  if (a.out_q.qs != nullptr) {
    quantize_q8_warp(o, d & 31, a.out_q.qs + row * a.out_q.qs_stride + head * D + (d & ~31),
                     a.out_q.ds + row * a.out_q.ds_stride + (head * D + d) / kQ8Block);
  }
}

// One thread per value. Q8_0: kv_dim is a multiple of 32, so a warp holds one block of one
// row (and returns as a whole) and quantizes it.
template <bool Q8>
__global__ void write_kv_kernel(const KvWriteArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= a.n_rows * a.kv_dim) return;
  const int64_t row = i / a.kv_dim;
  const int64_t e = i % a.kv_dim;
  const int64_t first = kv_row_slot(a, row) * a.kv_dim;
  const float k = a.k[row * a.k_stride + e];
  const float v = a.v[row * a.v_stride + e];
  if constexpr (Q8) {
    const int64_t block = first + (e & ~31);
    const int lane = threadIdx.x & 31;
    store_kv_q8_block(k, lane, static_cast<int8_t*>(a.k_cache) + block,
                      static_cast<__half*>(a.k_scales) + block / kKvQ8Block);
    store_kv_q8_block(v, lane, static_cast<int8_t*>(a.v_cache) + block,
                      static_cast<__half*>(a.v_scales) + block / kKvQ8Block);
  } else {
    static_cast<__half*>(a.k_cache)[first + e] = __float2half_rn(k);
    static_cast<__half*>(a.v_cache)[first + e] = __float2half_rn(v);
  }
}

// The tensor-core, decode or CUDA-core kernel, then the splits' reduction where there are
// several.
template <int D>
Status launch_attention(const AttentionArgs& a, bool tensor_cores, bool decode,
                        LaunchStream stream) {
  if (tensor_cores) {
    LS_RETURN_IF_ERROR(launch_attention_mma<D>(a, stream));
  } else if (decode) {
    // The decode rows: one a tile, or with split tiles single_rows of them.
    const int64_t rows = a.split_tiles ? a.single_rows : a.n_tiles;
    const bool mma =
        decode_on_tensor_cores(a.kv_type, a.n_head / a.n_head_kv, a.block_size, rows * a.n_head_kv,
                               current_device_sm_count(), a.decode_mma_group);
    LS_RETURN_IF_ERROR(mma ? launch_attention_decode_mma<D>(a, stream)
                           : launch_attention_decode<D>(a, stream));
  } else {
    const int nq8 = (a.max_tile_rows * (a.n_head / a.n_head_kv) + 7) & ~7;
    const int64_t smem = SmemLayout::bytes(nq8, D);
    const dim3 grid(static_cast<unsigned>(a.n_tiles), static_cast<unsigned>(a.n_head_kv),
                    static_cast<unsigned>(a.n_splits));
    const auto kernel =
        a.kv_type == KvType::kQ8_0 ? attention_kernel<D, true> : attention_kernel<D, false>;
    LS_CUDA_CHECK(launch_kernel(kernel, grid, kThreads, static_cast<size_t>(smem), stream, a));
  }
  if (a.n_splits > 1 && !(decode && a.split_counters != nullptr) &&
      a.reduce_first_row < a.n_batch_rows) {
    const dim3 reduce_grid(static_cast<unsigned>(a.n_batch_rows - a.reduce_first_row),
                           static_cast<unsigned>(a.n_head));
    LS_CUDA_CHECK(launch_kernel(attention_reduce_kernel<D>, reduce_grid, D, 0, stream, a));
  }
  return Status::ok();
}

}  // namespace

Status configure_attention_kernels() {
  LS_RETURN_IF_ERROR(configure_attention_mma_kernels());
  LS_RETURN_IF_ERROR(configure_attention_decode_mma_kernels());
  // The largest block: kMaxAttentionQueries query vectors.
  for (const auto kernel : {attention_kernel<64, false>, attention_kernel<64, true>}) {
    LS_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(SmemLayout::bytes(kMaxAttentionQueries, 64))));
  }
  for (const auto kernel : {attention_kernel<128, false>, attention_kernel<128, true>}) {
    LS_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(SmemLayout::bytes(kMaxAttentionQueries, 128))));
  }
  return Status::ok();
}

Status write_kv(const KvWriteArgs& a, LaunchStream stream) {
  LS_CUDA_REQUIRE(a.k != nullptr && a.v != nullptr && a.k_cache != nullptr && a.v_cache != nullptr);
  LS_CUDA_REQUIRE(a.positions != nullptr && a.seq_index != nullptr && a.block_tables != nullptr);
  LS_CUDA_REQUIRE(a.block_size > 0 && a.blocks_per_seq > 0 && a.kv_dim > 0 && a.n_rows >= 0);
  const bool q8 = a.type == KvType::kQ8_0;
  LS_CUDA_REQUIRE(!q8 || (a.k_scales != nullptr && a.v_scales != nullptr && a.kv_dim % 32 == 0));
  if (a.n_rows == 0) return Status::ok();
  constexpr int kWriteThreads = 256;
  const int64_t blocks = (a.n_rows * a.kv_dim + kWriteThreads - 1) / kWriteThreads;
  LS_CUDA_REQUIRE(blocks <= 0x7fffffff);
  LS_CUDA_CHECK(launch_kernel(q8 ? write_kv_kernel<true> : write_kv_kernel<false>,
                              static_cast<unsigned>(blocks), kWriteThreads, 0, stream, a));
  return Status::ok();
}

int64_t attention_workspace_floats(int64_t n_batch_rows, int32_t n_head, int32_t head_dim,
                                   int32_t n_splits) {
  if (n_splits <= 1) return 0;
  return n_batch_rows * n_head * n_splits * (static_cast<int64_t>(head_dim) + 2);
}

Status attention(const AttentionArgs& a, LaunchStream stream) {
  LS_CUDA_REQUIRE(a.q != nullptr && a.out != nullptr && a.k_cache != nullptr &&
                  a.v_cache != nullptr);
  LS_CUDA_REQUIRE(a.kv_type == KvType::kF16 || (a.k_scales != nullptr && a.v_scales != nullptr));
  LS_CUDA_REQUIRE(a.positions != nullptr && a.seq_index != nullptr && a.block_tables != nullptr);
  LS_CUDA_REQUIRE(a.tiles != nullptr && a.n_tiles >= 0 && a.max_tile_rows >= 1);
  LS_CUDA_REQUIRE(a.n_head_kv > 0 && a.n_head % a.n_head_kv == 0 && a.n_head_kv <= 65535);
  LS_CUDA_REQUIRE(a.max_tile_rows * (a.n_head / a.n_head_kv) <= kMaxAttentionQueries);
  LS_CUDA_REQUIRE(a.block_size > 0 && a.blocks_per_seq > 0 && a.scale > 0.0f);
  LS_CUDA_REQUIRE(a.n_splits >= 1 && a.n_splits <= 65535);
  LS_CUDA_REQUIRE(a.n_splits == 1 || (a.partial != nullptr && a.n_batch_rows > 0));
  // A Q8_0 cache's decode kernel takes runs of kDecodeMmaRun positions within one KV block.
  const bool decode_blocks = a.kv_type == KvType::kF16 || a.block_size % kDecodeMmaRun == 0;
  // Split tiles: one-row tiles on the decode kernel, which combines each row's splits itself;
  // in a mixed pass they lead, and the tiles after them take their own launch.
  LS_CUDA_REQUIRE(!a.split_tiles ||
                  ((a.max_tile_rows == 1 ||
                    (a.kernel == AttentionKernel::kAuto && a.single_row_tiles > 0 &&
                     a.single_rows > 0 && a.rest_splits >= 1 && a.rest_splits <= 65535)) &&
                   a.split_counters != nullptr && a.n_head / a.n_head_kv <= kMaxDecodeGroup &&
                   decode_blocks && a.kernel != AttentionKernel::kTensorCores &&
                   a.kernel != AttentionKernel::kCudaCores));
  LS_CUDA_REQUIRE(a.reduce_first_row >= 0 && a.reduce_first_row <= a.n_batch_rows);
  LS_CUDA_REQUIRE(a.q_stride % 4 == 0 && a.out_stride % 2 == 0);
  LS_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(a.q) % 16 == 0 &&
                  reinterpret_cast<uintptr_t>(a.out) % 8 == 0);
  LS_CUDA_REQUIRE(a.out_half.data == nullptr ||
                  (a.n_batch_rows > 0 && a.out_half.stride % 2 == 0 &&
                   a.out_half.stride >= static_cast<int64_t>(a.n_head) * a.head_dim));
  LS_CUDA_REQUIRE(a.out_q.qs == nullptr ||
                  (a.out_q.ds != nullptr && a.out_q.qs_stride % 16 == 0 &&
                   a.out_q.qs_stride >= static_cast<int64_t>(a.n_head) * a.head_dim));
  const int group_size = a.n_head / a.n_head_kv;
  // With one split the tensor-core kernel writes `out` itself, never as 8-bit blocks; with
  // several the reduction writes both.
  const bool tensor_cores_apply = (a.n_splits > 1 || a.out_q.qs == nullptr) &&
                                  a.max_tile_rows * group_size >= kMinTensorCoreQueries;
  if (a.kernel == AttentionKernel::kTensorCores && !tensor_cores_apply) {
    return make_error(StatusCode::kInvalidArgument,
                      "attention: the tensor-core kernel needs at least {} query vectors per "
                      "tile (got {} rows x {} query heads per KV head) and, with one split, no "
                      "8-bit output (got {})",
                      kMinTensorCoreQueries, a.max_tile_rows, group_size,
                      a.out_q.qs != nullptr ? "one" : "none");
  }
  const bool tensor_cores = tensor_cores_apply && (a.kernel == AttentionKernel::kTensorCores ||
                                                   a.kernel == AttentionKernel::kAuto);
  const bool decode_applies =
      a.max_tile_rows == 1 && group_size <= kMaxDecodeGroup && decode_blocks;
  if (a.kernel == AttentionKernel::kDecode && !decode_applies) {
    return make_error(StatusCode::kInvalidArgument,
                      "attention: the decode kernel needs tiles of one row (got up to {}), at "
                      "most {} query heads per KV head (got {}) and with a Q8_0 cache KV blocks "
                      "of a multiple of {} positions (got {})",
                      a.max_tile_rows, kMaxDecodeGroup, group_size, kDecodeMmaRun, a.block_size);
  }
  const bool decode = decode_applies &&
                      (a.kernel == AttentionKernel::kDecode || a.kernel == AttentionKernel::kAuto);
  if (a.n_tiles == 0) return Status::ok();
  LS_CUDA_REQUIRE(a.single_row_tiles >= 0 && a.single_row_tiles <= a.n_tiles);
  const bool mixed = a.kernel == AttentionKernel::kAuto && a.single_row_tiles > 0 &&
                     a.single_row_tiles < a.n_tiles && group_size <= kMaxDecodeGroup &&
                     decode_blocks;
  // Halves of the output: the decode kernel writes them where it writes `out` itself (one
  // split, or its own combination of the splits); elsewhere they are converted after the pass.
  if (a.out_half.data != nullptr &&
      (mixed || tensor_cores || !decode || (a.n_splits > 1 && a.split_counters == nullptr))) {
    AttentionArgs plain = a;
    plain.out_half = HalfRows{};
    LS_RETURN_IF_ERROR(attention(plain, stream));
    return convert_to_half(a.out, a.out_stride, a.n_batch_rows,
                           static_cast<int64_t>(a.n_head) * a.head_dim, a.out_half.data,
                           a.out_half.stride, a.out_half.type, stream);
  }
  if (mixed) {
    // The one-row tiles on the decode kernel, then the others. Both write disjoint rows.
    AttentionArgs single = a;
    single.n_tiles = a.single_row_tiles;
    single.max_tile_rows = 1;
    single.single_row_tiles = 0;
    AttentionArgs rest = a;
    rest.tiles = a.tiles + a.single_row_tiles;
    rest.n_tiles = a.n_tiles - a.single_row_tiles;
    rest.single_row_tiles = 0;
    rest.split_tiles = false;
    if (a.split_tiles) rest.n_splits = a.rest_splits;
    // The decode kernel combined its rows' splits itself: the reduction after the rest leaves
    // them (with split tiles their partials have another stride). Without counters it ran a
    // reduction of its own, and the second recombines them to the same values.
    if (a.split_counters != nullptr) {
      rest.reduce_first_row = a.split_tiles ? a.single_rows : a.single_row_tiles;
    }
    LS_RETURN_IF_ERROR(attention(single, stream));
    return attention(rest, stream);
  }
  switch (a.head_dim) {
    case 64: return launch_attention<64>(a, tensor_cores, decode, stream);
    case 128: return launch_attention<128>(a, tensor_cores, decode, stream);
    default:
      return make_error(StatusCode::kUnsupported,
                        "attention: the CUDA kernel handles head_dim 64 or 128, not {}",
                        a.head_dim);
  }
}

}  // namespace llamaserve::cuda
