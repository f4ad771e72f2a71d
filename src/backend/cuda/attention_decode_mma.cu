// Decode attention on tensor cores, over a Q8_0 cache (kv_q8.cuh) or, for grouped queries, an
// f16 one: one block per (row, KV head, split), W warps (4, or where the blocks fit one wave of
// the SMs 16 over a Q8_0 cache, 8 over an f16 one) that each take every W-th run of 16
// positions of the split (a split starts at a multiple of 16, and a run lies in one KV block). Per
// run a warp computes, with mma.m16n8k16 (layouts in mma.cuh; g = lane / 4, c = lane % 4):
//   S = Q · Kᵀ   A = the query heads of the KV head (row g = head g, rows past the group zero;
//                f16, pre-scaled by scale · log2 e), B = the K values of positions t0 + 8 j + n
//                (two n8 tiles; Q8_0 codes times their block's scale in f16). The head dimension
//                is summed in an order of the thread's own (k_step_dim): over a Q8_0 cache thread
//                c supplies dims c D/4 + 4 s .. + 3 of both Q and K in k-step s, so that its K is
//                D/4 contiguous codes of one block (one or two 16-byte reads and one scale a
//                position); over an f16 cache dims 32 u + 8 c .. + 7 in k-steps 2 u and 2 u + 1
//                (one 16-byte read each);
//   softmax      thread (g, c) holds head g's scores of positions t0 + 2c, 2c + 1, 2c + 8, 2c + 9;
//                the run's max is a quad's (two shuffles); base 2 (ex2); the accumulator is
//                rescaled only when some head's max grew;
//   Oᵀ = Vᵀ · Pᵀ  A = V values (Q8_0 codes, exact in f16), m-tile (j, h) = dims 32 j + 4 g + 2 h
//                (row g) and + 1 (row g + 8); B = the probabilities (times the positions' block-j
//                V scale), straight from the S registers (the C fragment of S's two n8 tiles is
//                the B fragment of Pᵀ for the run's k16). Thread (g, c) reads 4 values of dims
//                32 j + 4 g of positions t0 + 2c, 2c + 1, 2c + 8, 2c + 9; byte permutes pair two
//                positions' values as an A register.
// Per position that is far fewer instructions than a CUDA-core kernel's fp32 fma in the score and
// another in P·V (and over a Q8_0 cache the conversion of every code) with the scores summed
// across lanes, and the group's query heads share each K and V value: the f16 cache's CUDA-core
// kernel (attention_decode.cu) streams at the copy bandwidth for one query head a KV head but
// not for eight. A warp's runs go through two stages of shared memory of its own (cp.async, the
// next run's copies in flight while this run is computed; positions at or past the split's end
// are zero-filled; dynamic shared memory, configure_attention_decode_mma_kernels): over a Q8_0
// cache with no run held in registers a thread needs 128 registers and four blocks of 4 warps (or
// one of 16) fit an SM, whose copies and dependent loads at the start (tile, position, block
// table) overlap (holding the next run in registers instead, 174 registers, two blocks an SM: 256
// sequences of 7B F16 -7% against the CUDA-core decode kernel; launch bounds for five blocks, 96
// registers and spills: -8% at the kernel); an f16 run's stages take twice the bytes, three
// blocks of 4 warps (or one of 8) an SM. The warps' partial results are combined at the end
// (attention_decode_block.cuh), in the stages' memory. The scores use f16 Q and K values and f16
// probabilities (the error analysis of the tensor-core prompt kernel's test applies).
//
// Given AttentionArgs::earlier_kv_settled, a warp's first run is copied before the wait for the
// kernel that wrote the queries and the row's own K/V (as in attention_decode.cu).
#include "backend/cuda/attention_decode.h"

#include <cuda_fp16.h>

#include <type_traits>

#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/attention_decode_block.cuh"
#include "backend/cuda/check.h"
#include "backend/cuda/kv_q8.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/launch.h"
#include "backend/cuda/mma.cuh"

namespace llamaserve::cuda {
namespace {

constexpr int kFewWarps = 4;  // or many (kDecodeQ8ManyWarps, kDecodeF16MmaManyWarps)
constexpr int kStages = 2;    // a warp's runs in shared memory: the one computed, the next
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// One run in shared memory.
template <int D, bool kQ8>
struct RunStage;

// Q8_0: the 16 positions' K and V codes (rows padded by 16 bytes, so that a quad's reads of rows g
// and g + 1, and of rows 2c, hit distinct banks) and their scales.
template <int D>
struct RunStage<D, true> {
  static constexpr int kRow = D + 16;
  uint8_t k[kDecodeMmaRun][kRow];
  uint8_t v[kDecodeMmaRun][kRow];
  __half k_scale[kDecodeMmaRun][D / 32];
  __half v_scale[kDecodeMmaRun][D / 32];
};

// f16: the 16 positions' K and V rows, their 16-byte chunks in the orders of k_chunk and v_chunk.
template <int D>
struct RunStage<D, false> {
  __half k[kDecodeMmaRun][D];
  __half v[kDecodeMmaRun][D];
};

// Where chunk i (16 bytes) of an f16 run's K row `row` is stored. A 16-byte load serves 8 lanes
// at once; lanes 0-7 read chunks 4 u + c of rows g = 0 and 1 (rows of 128 or 256 bytes, one
// bank offset): odd rows swap the halves of each 128 bytes.
__device__ __forceinline__ int k_chunk(int row, int i) { return i ^ ((row & 1) << 2); }

// Where chunk i of an f16 run's V row `row` is stored. An 8-byte load serves 16 lanes at once;
// lanes 0-15 read 8 bytes of chunk 4 j + g / 2 (g < 4) of rows 2c (or 2c + 1, 2c + 8, 2c + 9):
// rows 2c and 2c + 1 take pair c of chunks of each 128 bytes.
__device__ __forceinline__ int v_chunk(int row, int i) { return i ^ (((row >> 1) & 3) << 1); }

// The first of the four dims thread c supplies of Q and K in k-step s (the layouts at the top).
template <int D, bool kQ8>
__device__ __forceinline__ int k_step_dim(int c, int s) {
  return kQ8 ? c * (D / 4) + 4 * s : 32 * (s / 2) + 8 * c + 4 * (s % 2);
}

// A warp's shared memory: its stages, and at the end its P·V sums.
template <int D, bool kQ8>
union alignas(16) WarpMemory {
  RunStage<D, kQ8> stage[kStages];
  float acc[kMaxDecodeGroup][D];
};

// The dynamic shared memory of a block of kWarps warps.
template <int D, int kWarps, bool kQ8>
constexpr int decode_mma_smem_bytes() {
  return kWarps * static_cast<int>(sizeof(WarpMemory<D, kQ8>));
}

// The many-warp blocks: one an SM, so up to 128 registers (without the bound ptxas took 64 for D
// = 64 and spilled); the few-warp ones: no bound beyond the block size (0), as they are tuned.
template <int D, int kWarps, bool kQ8>
__global__ void __launch_bounds__(32 * kWarps, kWarps == kFewWarps ? 0 : 1)
    attention_decode_mma_kernel(const AttentionArgs a) {
  constexpr int kSteps = D / 16;                 // k-steps of S; m-tiles of Oᵀ
  constexpr int kBlocks = D / 32;                // Q8_0 blocks of a row; f16: V loads of a position
  constexpr int kKCodes = D / 4;                 // Q8_0: K codes a thread takes of a position
  constexpr int kKWords = kKCodes / 16;          // their 16-byte reads
  constexpr int kPieces = kQ8 ? D / 16 : D / 8;  // 16-byte copies of a row
  constexpr int kScaleBytes = kBlocks * 2;
  using Scales = typename WideWord<D / 16>::Type;  // a position's D / 32 block scales
  using Stage = RunStage<D, kQ8>;
  pdl_launch_dependents();
  __shared__ float m_s[kWarps][kMaxDecodeGroup];
  __shared__ float l_s[kWarps][kMaxDecodeGroup];
  extern __shared__ uint4 dynamic_smem[];
  auto* memory = reinterpret_cast<WarpMemory<D, kQ8>*>(dynamic_smem);

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int c = lane & 3;
  const int group = a.n_head / a.n_head_kv;
  const DecodeBlock b = decode_block<kDecodeMmaRun>(a);
  const int end = b.end;
  const int32_t* block_table =
      a.block_tables + static_cast<int64_t>(a.seq_index[b.row]) * a.blocks_per_seq;
  using Value = std::conditional_t<kQ8, uint8_t, __half>;  // Q8_0 codes or f16 values
  const auto* k_values = static_cast<const Value*>(a.k_cache);
  const auto* v_values = static_cast<const Value*>(a.v_cache);
  const auto* k_scales = static_cast<const __half*>(a.k_scales);
  const auto* v_scales = static_cast<const __half*>(a.v_scales);
  WarpMemory<D, kQ8>& mine = memory[warp];

  // The warp's run k: positions [run_start(k), run_start(k) + kDecodeMmaRun).
  auto run_start = [&](int k) { return b.start + (warp + kWarps * k) * kDecodeMmaRun; };
  // The KV block of each of the warp's runs, 32 runs at a time (lane j: run window + j), so that
  // a run's copies do not wait for a block-table read of their own; runs are asked for in
  // increasing order.
  int window = -32;
  int32_t window_blocks = 0;
  auto run_block = [&](int k) {
    if (k >= window + 32) {
      window = k;
      const int t = run_start(k + lane);
      window_blocks = t < end ? block_table[t / a.block_size] : 0;
    }
    return __shfl_sync(0xffffffffu, window_blocks, k - window);
  };
  // Copies of run k into `stage`: positions in [from, to) from the cache, with `pad` those at or
  // past `end` zeros (masked, and their zero V (and scales) keep P·V finite), the others not
  // touched (each position is copied once: two copies in flight to one address land in either
  // order). Lane l copies 16-byte pieces l, l + 32, .. of the K and V rows, and over a Q8_0 cache
  // one position's K (lanes 0-15) or V (16-31) scales.
  auto copy_run = [&](Stage& stage, int k, int from, int to, bool pad) {
    const int t0 = run_start(k);
    // The cache row (position × KV head) of position t0; the run's others follow n_head_kv apart.
    const int64_t first =
        (static_cast<int64_t>(run_block(k)) * a.block_size + t0 % a.block_size) * a.n_head_kv +
        b.kv_head;
#pragma unroll
    for (int r = 0; r < kDecodeMmaRun * kPieces / 32; ++r) {
      const int i = lane + 32 * r;
      const int p = i / kPieces;
      const int piece = i % kPieces;
      const int t = t0 + p;
      if ((t >= from && t < to) || (pad && t >= end)) {
        const bool zero = t >= end;
        // The piece's first value: 16 codes or 8 halves.
        const int64_t offset = (first + static_cast<int64_t>(p) * a.n_head_kv) * D +
                               piece * (16 / static_cast<int>(sizeof(Value)));
        if constexpr (kQ8) {
          cp_async_or_zero<16>(&stage.k[p][piece * 16], zero ? k_values : k_values + offset, zero);
          cp_async_or_zero<16>(&stage.v[p][piece * 16], zero ? v_values : v_values + offset, zero);
        } else {
          cp_async_or_zero<16>(&stage.k[p][8 * k_chunk(p, piece)],
                               zero ? k_values : k_values + offset, zero);
          cp_async_or_zero<16>(&stage.v[p][8 * v_chunk(p, piece)],
                               zero ? v_values : v_values + offset, zero);
        }
      }
    }
    if constexpr (kQ8) {
      const int p = lane % kDecodeMmaRun;
      const int t = t0 + p;
      if ((t >= from && t < to) || (pad && t >= end)) {
        const int64_t offset = (first + static_cast<int64_t>(p) * a.n_head_kv) * kBlocks;
        const bool zero = t >= end;
        const __half* scales = lane < kDecodeMmaRun ? k_scales : v_scales;
        __half* dst = lane < kDecodeMmaRun ? stage.k_scale[p] : stage.v_scale[p];
        cp_async_or_zero<kScaleBytes>(dst, zero ? scales : scales + offset, zero);
      }
    }
  };
  // Positions below `settled` were written before this pass (attention_decode.cu).
  const int settled = a.earlier_kv_settled ? min(end, b.ctx - 1) : b.start;
  constexpr int kStride = kWarps * kDecodeMmaRun;
  int t0 = run_start(0);
  copy_run(mine.stage[0], 0, t0, settled, false);
  pdl_wait();
  copy_run(mine.stage[0], 0, max(t0, settled), end, true);
  cp_async_commit();

  // Q's A fragments: a[0] and a[2] of each k-step for head g (rows g + 8 are zeros).
  uint32_t qa[kSteps][2];
  {
    const bool head = g < group;
    const float* qp =
        a.q + static_cast<int64_t>(b.row) * a.q_stride + (b.kv_head * group + (head ? g : 0)) * D;
    const float scale = head ? a.scale * kLog2e : 0.0f;
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const float4 x = *reinterpret_cast<const float4*>(qp + k_step_dim<D, kQ8>(c, s));
      qa[s][0] = pack_half2(x.x * scale, x.y * scale);
      qa[s][1] = pack_half2(x.z * scale, x.w * scale);
    }
  }

  float o[kSteps][4] = {};  // Oᵀ: m-tile 2 j + h (layout at the top), columns heads 2c, 2c + 1
  float m = -INFINITY;      // head g's running max (base 2), the same in the quad
  float l = 0.0f;           // head g's sum over this thread's positions
  for (int i = 0; t0 < end; ++i, t0 += kStride) {
    // The next run's copies go out before this run's arithmetic (one group per run, empty or
    // not); then this run's have landed, and the warp's lanes see each other's.
    if (t0 + kStride < end) {
      copy_run(mine.stage[(i + 1) % kStages], i + 1, t0 + kStride, end, true);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncwarp();
    const Stage& run = mine.stage[i % kStages];

    float s[2][4] = {};
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int row = 8 * j + g;
      uint32_t kb[D / 8];  // f16 pairs: k-step st's B fragment is kb[2 st], kb[2 st + 1]
      if constexpr (kQ8) {
        const float kd = __half2float(run.k_scale[row][c * kKCodes / 32]);
#pragma unroll
        for (int w = 0; w < kKWords; ++w) {
          const uint4 codes = *reinterpret_cast<const uint4*>(&run.k[row][c * kKCodes + 16 * w]);
          const uint4 lo = kv_codes_to_half8(codes.x, codes.y, kd);
          const uint4 hi = kv_codes_to_half8(codes.z, codes.w, kd);
          const uint32_t pairs[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
          for (int p = 0; p < 8; ++p) kb[8 * w + p] = pairs[p];
        }
      } else {
#pragma unroll
        for (int u = 0; u < D / 32; ++u) {
          const uint4 values =
              *reinterpret_cast<const uint4*>(&run.k[row][8 * k_chunk(row, 4 * u + c)]);
          kb[4 * u] = values.x;
          kb[4 * u + 1] = values.y;
          kb[4 * u + 2] = values.z;
          kb[4 * u + 3] = values.w;
        }
      }
#pragma unroll
      for (int st = 0; st < kSteps; ++st) {
        const uint32_t qf[4] = {qa[st][0], 0u, qa[st][1], 0u};
        mma_16816(s[j], qf, kb[2 * st], kb[2 * st + 1]);
      }
    }

    // Head g's probabilities of positions t0 + 2c, 2c + 1, 2c + 8, 2c + 9.
    float p[4] = {s[0][0], s[0][1], s[1][0], s[1][1]};
    float run_max = -INFINITY;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (t0 + 2 * c + (k & 1) + 8 * (k >> 1) >= end) p[k] = -INFINITY;
      run_max = fmaxf(run_max, p[k]);
    }
    run_max = fmaxf(run_max, __shfl_xor_sync(0xffffffffu, run_max, 1));
    run_max = fmaxf(run_max, __shfl_xor_sync(0xffffffffu, run_max, 2));
    const float m_new = fmaxf(m, run_max);       // finite: position t0 is below end
    const float alpha = exp2_approx(m - m_new);  // 0 while m is -inf
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      p[k] = exp2_approx(p[k] - m_new);
      sum += p[k];
    }
    l = fmaf(l, alpha, sum);
    m = m_new;
    if (__any_sync(0xffffffffu, alpha != 1.0f)) {
      const float alpha_lo = __shfl_sync(0xffffffffu, alpha, 8 * c);      // head 2c's
      const float alpha_hi = __shfl_sync(0xffffffffu, alpha, 8 * c + 4);  // head 2c + 1's
#pragma unroll
      for (int mt = 0; mt < kSteps; ++mt) {
        o[mt][0] *= alpha_lo;
        o[mt][1] *= alpha_hi;
        o[mt][2] *= alpha_lo;
        o[mt][3] *= alpha_hi;
      }
    }

    // This thread's V rows: positions t0 + 2c, 2c + 1, 2c + 8, 2c + 9.
    auto v_row = [&](int k) { return 2 * c + (k & 1) + 8 * (k >> 1); };
    if constexpr (kQ8) {
      Scales v_scale[4];
      uint32_t v[4][kBlocks];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        v_scale[k] = *reinterpret_cast<const Scales*>(run.v_scale[v_row(k)]);
#pragma unroll
        for (int j = 0; j < kBlocks; ++j) {
          v[k][j] = *reinterpret_cast<const uint32_t*>(&run.v[v_row(k)][32 * j + 4 * g]);
        }
      }
#pragma unroll
      for (int j = 0; j < kBlocks; ++j) {
        auto vd = [&](int k) {
          return __half2float(reinterpret_cast<const __half*>(&v_scale[k])[j]);
        };
        const uint32_t b0 = pack_half2(p[0] * vd(0), p[1] * vd(1));
        const uint32_t b1 = pack_half2(p[2] * vd(2), p[3] * vd(3));
        // Positions (2c, 2c + 1) and (2c + 8, 2c + 9) paired byte by byte, sign bits flipped:
        // dims 4g, 4g + 1 (low) and 4g + 2, 4g + 3 (high) of block j.
        const uint32_t flip = 0x80808080u;
        const uint32_t low01 = __byte_perm(v[0][j], v[1][j], 0x5140) ^ flip;
        const uint32_t high01 = __byte_perm(v[0][j], v[1][j], 0x7362) ^ flip;
        const uint32_t low23 = __byte_perm(v[2][j], v[3][j], 0x5140) ^ flip;
        const uint32_t high23 = __byte_perm(v[2][j], v[3][j], 0x7362) ^ flip;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint32_t w01 = h == 0 ? low01 : high01;
          const uint32_t w23 = h == 0 ? low23 : high23;
          const uint32_t va[4] = {
              half2_bits(kv_code_pair(w01, 0)), half2_bits(kv_code_pair(w01, 1)),
              half2_bits(kv_code_pair(w23, 0)), half2_bits(kv_code_pair(w23, 1))};
          mma_16816(o[2 * j + h], va, b0, b1);
        }
      }
    } else {
      uint2 v[4][kBlocks];  // dims 32 j + 4 g .. + 3
#pragma unroll
      for (int k = 0; k < 4; ++k) {
#pragma unroll
        for (int j = 0; j < kBlocks; ++j) {
          const int row = v_row(k);
          v[k][j] = *reinterpret_cast<const uint2*>(
              &run.v[row][8 * v_chunk(row, 4 * j + g / 2) + 4 * (g & 1)]);
        }
      }
      const uint32_t b0 = pack_half2(p[0], p[1]);
      const uint32_t b1 = pack_half2(p[2], p[3]);
#pragma unroll
      for (int j = 0; j < kBlocks; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          // Positions (2c, 2c + 1) and (2c + 8, 2c + 9) paired: dim 32 j + 4 g + 2 h (row g of
          // the m-tile) and the one after it (row g + 8).
          const uint32_t w0 = h == 0 ? v[0][j].x : v[0][j].y;
          const uint32_t w1 = h == 0 ? v[1][j].x : v[1][j].y;
          const uint32_t w2 = h == 0 ? v[2][j].x : v[2][j].y;
          const uint32_t w3 = h == 0 ? v[3][j].x : v[3][j].y;
          const uint32_t va[4] = {__byte_perm(w0, w1, 0x5410), __byte_perm(w0, w1, 0x7632),
                                  __byte_perm(w2, w3, 0x5410), __byte_perm(w2, w3, 0x7632)};
          mma_16816(o[2 * j + h], va, b0, b1);
        }
      }
    }
    __syncwarp();  // every lane is done with the stage before the next copies into it
  }
  cp_async_wait<0>();  // nothing in flight into the memory that now takes the sums
  __syncwarp();

  // The warp's (max, sum, P·V) per query head, the max in natural units as the splits' partials
  // and the end's combination expect.
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  if (c == 0 && g < group) {
    m_s[warp][g] = m * kLn2;
    l_s[warp][g] = l;
  }
#pragma unroll
  for (int mt = 0; mt < kSteps; ++mt) {
    const int d = 32 * (mt / 2) + 4 * g + 2 * (mt % 2);
    if (2 * c < group) {
      mine.acc[2 * c][d] = o[mt][0];
      mine.acc[2 * c][d + 1] = o[mt][2];
    }
    if (2 * c + 1 < group) {
      mine.acc[2 * c + 1][d] = o[mt][1];
      mine.acc[2 * c + 1][d + 1] = o[mt][3];
    }
  }
  __syncthreads();
  finish_decode_block<D, kWarps, kMaxDecodeGroup>(a, b, group, m_s, l_s, &memory[0].acc[0][0],
                                                  sizeof(WarpMemory<D, kQ8>) / sizeof(float));
}

template <int D, int kWarps, bool kQ8>
Status launch_blocks(const AttentionArgs& a, dim3 grid, LaunchStream stream) {
  LS_CUDA_CHECK(launch_kernel(attention_decode_mma_kernel<D, kWarps, kQ8>, grid, 32 * kWarps,
                              decode_mma_smem_bytes<D, kWarps, kQ8>(), stream, a));
  return Status::ok();
}

template <int D, bool kQ8>
Status launch_cache(const AttentionArgs& a, LaunchStream stream) {
  constexpr int kManyWarps = kQ8 ? kDecodeQ8ManyWarps : kDecodeF16MmaManyWarps;
  const DecodeGrid g = decode_grid(a);
  int warps = a.decode_warps;
  if (warps == 0) warps = g.blocks <= current_device_sm_count() ? kManyWarps : kFewWarps;
  if (warps == kManyWarps) return launch_blocks<D, kManyWarps, kQ8>(a, g.grid, stream);
  if (warps == kFewWarps) return launch_blocks<D, kFewWarps, kQ8>(a, g.grid, stream);
  return make_error(StatusCode::kInvalidArgument,
                    "attention: the tensor-core decode kernel runs {} or {} warps per block over "
                    "{} cache, not {}",
                    kFewWarps, kManyWarps, kQ8 ? "a Q8_0" : "an f16", warps);
}

template <int D, int kWarps, bool kQ8>
Status allow_smem() {
  // Above the default 48 KB: the stages of most shapes.
  LS_CUDA_CHECK(cudaFuncSetAttribute(attention_decode_mma_kernel<D, kWarps, kQ8>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     decode_mma_smem_bytes<D, kWarps, kQ8>()));
  return Status::ok();
}

}  // namespace

template <int D>
Status launch_attention_decode_mma(const AttentionArgs& a, LaunchStream stream) {
  return a.kv_type == KvType::kQ8_0 ? launch_cache<D, true>(a, stream)
                                    : launch_cache<D, false>(a, stream);
}

Status configure_attention_decode_mma_kernels() {
  LS_RETURN_IF_ERROR((allow_smem<64, kDecodeQ8ManyWarps, true>()));
  LS_RETURN_IF_ERROR((allow_smem<128, kDecodeQ8ManyWarps, true>()));
  LS_RETURN_IF_ERROR((allow_smem<64, kFewWarps, true>()));
  LS_RETURN_IF_ERROR((allow_smem<128, kFewWarps, true>()));
  LS_RETURN_IF_ERROR((allow_smem<64, kDecodeF16MmaManyWarps, false>()));
  LS_RETURN_IF_ERROR((allow_smem<128, kDecodeF16MmaManyWarps, false>()));
  LS_RETURN_IF_ERROR((allow_smem<64, kFewWarps, false>()));
  LS_RETURN_IF_ERROR((allow_smem<128, kFewWarps, false>()));
  return Status::ok();
}

template Status launch_attention_decode_mma<64>(const AttentionArgs&, LaunchStream);
template Status launch_attention_decode_mma<128>(const AttentionArgs&, LaunchStream);

}  // namespace llamaserve::cuda
