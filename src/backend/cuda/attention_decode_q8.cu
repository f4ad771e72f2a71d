// Decode attention over a Q8_0 cache (kv_q8.cuh) on tensor cores: one block per (row, KV head,
// split), W warps (4, or 16 where the blocks fit one wave of the SMs) that each take every W-th
// run of 16 positions of the split (a split starts at a multiple of 16, and a run lies in one KV
// block). Per run a warp computes, with
// mma.m16n8k16 (layouts in mma.cuh; g = lane / 4, c = lane % 4):
//   S = Q · Kᵀ   A = the query heads of the KV head (row g = head g, rows past the group zero;
//                f16, pre-scaled by scale · log2 e), B = the K codes of positions t0 + 8 j + n
//                (two n8 tiles) times their block's scale in f16. The head dimension is summed in
//                an order of the thread's own: in k-step s, thread c supplies dims c D/4 + 4 s ..
//                + 3 of both Q and K, so that a thread's K is D/4 contiguous codes of one block
//                (one or two 16-byte reads and one scale a position);
//   softmax      thread (g, c) holds head g's scores of positions t0 + 2c, 2c + 1, 2c + 8, 2c + 9;
//                the run's max is a quad's (two shuffles); base 2 (ex2); the accumulator is
//                rescaled only when some head's max grew;
//   Oᵀ = Vᵀ · Pᵀ  A = V codes (exact in f16), m-tile (j, h) = dims 32 j + 4 g + 2 h (row g) and
//                + 1 (row g + 8) of block j; B = the probabilities times the positions' block-j V
//                scale, straight from the S registers (the C fragment of S's two n8 tiles is the
//                B fragment of Pᵀ for the run's k16). Thread (g, c) reads 4 codes of each block of
//                positions t0 + 2c, 2c + 1, 2c + 8, 2c + 9; byte permutes pair two positions'
//                codes as an A register.
// Per position that is far fewer instructions than converting every code to fp32 for an fma in
// the score and another in P·V and summing the scores across lanes, as a CUDA-core kernel does,
// and for grouped-query attention the group's heads share each conversion. A warp's runs go
// through two stages of shared memory of its own (cp.async, the next run's copies in flight
// while this run is computed; positions at or past the split's end are zero-filled; dynamic
// shared memory, configure_attention_decode_q8_kernels): with no run held in registers a thread
// needs 128 registers and four blocks of 4 warps (or one of 16) fit an SM, whose copies and
// dependent loads at the start (tile, position, block table) overlap (holding the next run in
// registers instead, 174 registers, two blocks an SM: 256 sequences of 7B F16 -7% against the
// CUDA-core decode kernel; launch bounds for five blocks, 96 registers and spills: -8% at the
// kernel). The warps' partial results are combined at the end (attention_decode_block.cuh), in
// the stages' memory. The scores use f16 Q and K values and f16
// probabilities (the error analysis of the tensor-core prompt kernel's test applies).
//
// Given AttentionArgs::earlier_kv_settled, a warp's first run is copied before the wait for the
// kernel that wrote the queries and the row's own K/V (as in attention_decode.cu).
#include "backend/cuda/attention_decode.h"

#include <cuda_fp16.h>

#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/attention_decode_block.cuh"
#include "backend/cuda/check.h"
#include "backend/cuda/kv_q8.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/launch.h"
#include "backend/cuda/mma.cuh"

namespace llamaserve::cuda {
namespace {

constexpr int kFewWarps = 4;
constexpr int kStages = 2;  // a warp's runs in shared memory: the one computed, the next
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// One run in shared memory: the 16 positions' K and V codes (rows padded by 16 bytes, so that a
// quad's reads of rows g and g + 1, and of rows 2c, hit distinct banks) and their scales.
template <int D>
struct RunStage {
  static constexpr int kRow = D + 16;
  uint8_t k[kDecodeQ8Run][kRow];
  uint8_t v[kDecodeQ8Run][kRow];
  __half k_scale[kDecodeQ8Run][D / 32];
  __half v_scale[kDecodeQ8Run][D / 32];
};

// A warp's shared memory: its stages, and at the end its P·V sums.
template <int D>
union alignas(16) WarpMemory {
  RunStage<D> stage[kStages];
  float acc[kMaxDecodeGroup][D];
};

// The dynamic shared memory of a block of kWarps warps.
template <int D, int kWarps>
constexpr int decode_q8_smem_bytes() {
  return kWarps * static_cast<int>(sizeof(WarpMemory<D>));
}

// 16 warps: one block an SM, so up to 128 registers (without the bound ptxas took 64 for D = 64
// and spilled); 4 warps: no bound beyond the block size (0), as they are tuned.
template <int D, int kWarps>
__global__ void __launch_bounds__(32 * kWarps, kWarps == kFewWarps ? 0 : 1)
    attention_decode_q8_kernel(const AttentionArgs a) {
  constexpr int kSteps = D / 16;         // k-steps of S; m-tiles of Oᵀ
  constexpr int kBlocks = D / 32;        // Q8_0 blocks of a row
  constexpr int kKCodes = D / 4;         // K codes a thread takes of a position
  constexpr int kKWords = kKCodes / 16;  // their 16-byte reads
  constexpr int kPieces = D / 16;        // 16-byte copies of a row
  constexpr int kScaleBytes = kBlocks * 2;
  using Scales = typename WideWord<D / 16>::Type;  // a position's D / 32 block scales
  pdl_launch_dependents();
  __shared__ float m_s[kWarps][kMaxDecodeGroup];
  __shared__ float l_s[kWarps][kMaxDecodeGroup];
  extern __shared__ uint4 dynamic_smem[];
  auto* memory = reinterpret_cast<WarpMemory<D>*>(dynamic_smem);

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int c = lane & 3;
  const int group = a.n_head / a.n_head_kv;
  const DecodeBlock b = decode_block<kDecodeQ8Run>(a);
  const int end = b.end;
  const int32_t* block_table =
      a.block_tables + static_cast<int64_t>(a.seq_index[b.row]) * a.blocks_per_seq;
  const auto* k_codes = static_cast<const uint8_t*>(a.k_cache);
  const auto* v_codes = static_cast<const uint8_t*>(a.v_cache);
  const auto* k_scales = static_cast<const __half*>(a.k_scales);
  const auto* v_scales = static_cast<const __half*>(a.v_scales);
  WarpMemory<D>& mine = memory[warp];

  // The warp's run k: positions [run_start(k), run_start(k) + kDecodeQ8Run).
  auto run_start = [&](int k) { return b.start + (warp + kWarps * k) * kDecodeQ8Run; };
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
  // past `end` zeros (masked, and their zero scales keep P·V finite), the others not touched
  // (each position is copied once: two copies in flight to one address land in either order). Lane
  // l copies 16-byte pieces l, l + 32, .. of the K and V rows, and one position's K (lanes 0-15) or
  // V (16-31) scales.
  auto copy_run = [&](RunStage<D>& stage, int k, int from, int to, bool pad) {
    const int t0 = run_start(k);
    // The cache row (position × KV head) of position t0; the run's others follow n_head_kv apart.
    const int64_t first =
        (static_cast<int64_t>(run_block(k)) * a.block_size + t0 % a.block_size) * a.n_head_kv +
        b.kv_head;
#pragma unroll
    for (int r = 0; r < kDecodeQ8Run * kPieces / 32; ++r) {
      const int i = lane + 32 * r;
      const int p = i / kPieces;
      const int piece = i % kPieces;
      const int t = t0 + p;
      if ((t >= from && t < to) || (pad && t >= end)) {
        const int64_t offset = (first + static_cast<int64_t>(p) * a.n_head_kv) * D + piece * 16;
        const bool zero = t >= end;
        cp_async_or_zero<16>(&stage.k[p][piece * 16], zero ? k_codes : k_codes + offset, zero);
        cp_async_or_zero<16>(&stage.v[p][piece * 16], zero ? v_codes : v_codes + offset, zero);
      }
    }
    const int p = lane % kDecodeQ8Run;
    const int t = t0 + p;
    if ((t >= from && t < to) || (pad && t >= end)) {
      const int64_t offset = (first + static_cast<int64_t>(p) * a.n_head_kv) * kBlocks;
      const bool zero = t >= end;
      const __half* scales = lane < kDecodeQ8Run ? k_scales : v_scales;
      __half* dst = lane < kDecodeQ8Run ? stage.k_scale[p] : stage.v_scale[p];
      cp_async_or_zero<kScaleBytes>(dst, zero ? scales : scales + offset, zero);
    }
  };
  // Positions below `settled` were written before this pass (attention_decode.cu).
  const int settled = a.earlier_kv_settled ? min(end, b.ctx - 1) : b.start;
  constexpr int kStride = kWarps * kDecodeQ8Run;
  int t0 = run_start(0);
  copy_run(mine.stage[0], 0, t0, settled, false);
  pdl_wait();
  copy_run(mine.stage[0], 0, max(t0, settled), end, true);
  cp_async_commit();

  // Q's A fragments: a[0] and a[2] of each k-step for head g (rows g + 8 are zeros).
  uint32_t qa[kSteps][2];
  {
    const bool head = g < group;
    const float* qp = a.q + static_cast<int64_t>(b.row) * a.q_stride +
                      (b.kv_head * group + (head ? g : 0)) * D + c * kKCodes;
    const float scale = head ? a.scale * kLog2e : 0.0f;
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const float4 x = reinterpret_cast<const float4*>(qp)[s];
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
    const RunStage<D>& run = mine.stage[i % kStages];

    float s[2][4] = {};
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int row = 8 * j + g;
      uint32_t kb[kKCodes / 2];  // f16 pairs: pair p = codes 2p, 2p + 1 of the thread's piece
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
    Scales v_scale[4];
    uint32_t v[4][kBlocks];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int row = 2 * c + (k & 1) + 8 * (k >> 1);
      v_scale[k] = *reinterpret_cast<const Scales*>(run.v_scale[row]);
#pragma unroll
      for (int j = 0; j < kBlocks; ++j) {
        v[k][j] = *reinterpret_cast<const uint32_t*>(&run.v[row][32 * j + 4 * g]);
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
        const uint32_t va[4] = {half2_bits(kv_code_pair(w01, 0)), half2_bits(kv_code_pair(w01, 1)),
                                half2_bits(kv_code_pair(w23, 0)), half2_bits(kv_code_pair(w23, 1))};
        mma_16816(o[2 * j + h], va, b0, b1);
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
                                                  sizeof(WarpMemory<D>) / sizeof(float));
}

}  // namespace

template <int D>
Status launch_attention_decode_q8(const AttentionArgs& a, LaunchStream stream) {
  const int z = a.split_tiles ? 1 : a.n_splits;  // split tiles: a block per tile and KV head
  const dim3 grid(static_cast<unsigned>(a.n_tiles), static_cast<unsigned>(a.n_head_kv),
                  static_cast<unsigned>(z));
  int warps = a.decode_warps;
  if (warps == 0) {
    const int64_t blocks = static_cast<int64_t>(a.n_tiles) * a.n_head_kv * z;
    warps = blocks <= current_device_sm_count() ? kDecodeQ8ManyWarps : kFewWarps;
  }
  if (warps == kDecodeQ8ManyWarps) {
    LS_CUDA_CHECK(launch_kernel(attention_decode_q8_kernel<D, kDecodeQ8ManyWarps>, grid,
                                32 * kDecodeQ8ManyWarps,
                                decode_q8_smem_bytes<D, kDecodeQ8ManyWarps>(), stream, a));
  } else if (warps == kFewWarps) {
    LS_CUDA_CHECK(launch_kernel(attention_decode_q8_kernel<D, kFewWarps>, grid, 32 * kFewWarps,
                                decode_q8_smem_bytes<D, kFewWarps>(), stream, a));
  } else {
    return make_error(StatusCode::kInvalidArgument,
                      "attention: the Q8_0 decode kernel runs {} or {} warps per block, not {}",
                      kFewWarps, kDecodeQ8ManyWarps, warps);
  }
  return Status::ok();
}

Status configure_attention_decode_q8_kernels() {
  // Above the default 48 KB: the 16-warp blocks' stages.
  LS_CUDA_CHECK(cudaFuncSetAttribute(attention_decode_q8_kernel<64, kDecodeQ8ManyWarps>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     decode_q8_smem_bytes<64, kDecodeQ8ManyWarps>()));
  LS_CUDA_CHECK(cudaFuncSetAttribute(attention_decode_q8_kernel<128, kDecodeQ8ManyWarps>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     decode_q8_smem_bytes<128, kDecodeQ8ManyWarps>()));
  return Status::ok();
}

template Status launch_attention_decode_q8<64>(const AttentionArgs&, LaunchStream);
template Status launch_attention_decode_q8<128>(const AttentionArgs&, LaunchStream);

}  // namespace llamaserve::cuda
