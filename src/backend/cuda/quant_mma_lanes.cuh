// How quant_mma.cu's lanes share a step's four units of a weight row (formats.cuh), and which
// activations each lane reads for them.
//
// A lane (g, q) of a warp feeds its elements to the mma k-slots 2q, 2q + 1, 2q + 8, 2q + 9; any
// assignment of a row's elements to the four lanes of a quad works, as long as a lane reads the
// activations of the elements whose weights it decodes. A lane's step is two runs k of 16
// elements, each run two halves of 8 (one 16-byte load of activations each):
//
//   WholeUnits: lane q takes unit 4t + q whole (run k is the unit's run k, its halves the run's
//     two 8-element halves). A quad's four 16-byte activation loads fall 32 bytes apart (each
//     lane's run is 32 bytes of its own), so every load instruction touches two 128-byte lines
//     of each activation row and uses half of each 32-byte sector.
//   QuadPieces (passes of more than 32 activation rows; every type but Q5_K): lane q takes 8
//     bytes of codes of two units, byte 8 (q % 2) of units 4t + q / 2 (half 0) and 4t + 2 + q / 2
//     (half 1). A quad's four activation loads are then 64 bytes of each row in two whole 32-byte
//     sectors (contiguous for Q4_K, Q6_K and Q8_0, whose neighbouring units hold neighbouring
//     elements; for Q4_0 and Q4_1 run k of two neighbouring blocks): half as many sectors and
//     lines per load instruction. L1 requests were what bounded the kernel at 64 rows of Q4_K
//     (ncu: L1/TEX throughput 84%, DRAM 8%), L2 throughput at 64 rows of Q4_0 (79%, DRAM 5%).
//
// Each gives, for a lane's step (t, q) and its unit u = min(4t + q, units - 1):
//   Raw, load(w, row, s)             the lane's weight registers of one row
//   valid(s, half)                   whether the half's elements are in the row (else the kernel
//                                    zeroes their activations; the lane loaded the row's last
//                                    unit in their place)
//   scales(raw, s, scale, min)       [run k][half]: each half's scale (and min)
//   half_scales(raw, s, scale, min)  (Q4_K, Q5_K) the same as f16 pairs [run k] = (half 0,
//                                    half 1), each rounded once as lane_half_scales does; worked
//                                    out in f16 arithmetic, a third of the instructions
//   codes(raw, s, k, w)              run k's 16 codes in pair order (formats.cuh)
//   code_pairs(raw, s, k, pairs)     (4-bit types) the same as exact f16 pairs minus kCodeBias,
//                                    pair p holding elements 2p and 2p + 1, without a byte
//                                    permute (formats.cuh); lane_code_pairs gives them for every
//                                    type
//   x_col(s, k, half)                the row element of the half's first activation
#pragma once

#include <type_traits>

#include "backend/cuda/formats.cuh"

namespace llamaserve::cuda {

struct LaneStep {
  int t;      // the step: units 4t .. 4t + 3 of the row
  int q;      // the lane's place in its quad
  int u;      // WholeUnits: the lane's unit (clamped to the row's last), worked out once a step
  int units;  // the row's units
};

// min(u, s.units - 1), on the host too.
LS_FORMAT int clamp_unit(LaneStep s, int u) { return u < s.units ? u : s.units - 1; }

// A K-quant super-block's d · (scale bytes i, j) and -dmin · (min bytes i, j) as f16 pairs: the
// products of an f16 and a 6-bit integer are exact in fp32, so one f16 rounding of each is the
// same value as rounding the fp32 product (lane_half_scales' fallback).
LS_FORMAT void k_quant_half_scales(const uint4& meta, bool high, uint32_t i, uint32_t j,
                                   __half2& scale, __half2& min) {
  uint32_t sc, mn;
  k_quant_scale_bytes(meta, high, sc, mn);
  const __half2 d_dmin = bits_half2(meta.x);
  scale = __hmul2(bytes_as_half2(sc, i, j, 0.0f), __low2half2(d_dmin));
  min = __hmul2(bytes_as_half2(mn, i, j, 0.0f), __hneg2(__high2half2(d_dmin)));
}

// Formats that give their runs' codes as f16 pairs themselves (the 4-bit types).
template <class F>
inline constexpr bool kHasCodePairs = requires {
  &F::code_pairs;
};

template <TensorType T>
struct WholeUnits {
  using F = Format<T>;
  using Raw = typename F::Raw;
  static constexpr int kRuns = F::kRuns;
  LS_FORMAT static Raw load(const DeviceMatrix& w, int64_t row, LaneStep s) {
    return F::load(w, row, s.u);
  }
  LS_FORMAT static bool valid(LaneStep s, int) { return 4 * s.t + s.q < s.units; }
  LS_FORMAT static void scales(const Raw& raw, LaneStep s, float (&scale)[kRuns][2],
                               float (&min)[kRuns][2]) {
    float sc[kRuns], mn[kRuns] = {};
    F::scales(raw, s.u, sc, mn);
    LS_UNROLL
    for (int k = 0; k < kRuns; ++k) {
      scale[k][0] = scale[k][1] = sc[k];
      min[k][0] = min[k][1] = mn[k];
    }
  }
  // Q4_K, Q5_K: runs 0 and 1 are sub-blocks 2c and 2c + 1 (bytes 2 (c % 2) and 2 (c % 2) + 1 of
  // the scale words), each run's scale the same for both halves.
  LS_FORMAT static void half_scales(const Raw& raw, LaneStep s, __half2 (&scale)[kRuns],
                                    __half2 (&min)[kRuns]) requires(T == TensorType::Q4_K ||
                                                                    T == TensorType::Q5_K) {
    const int c = (s.u >> 1) & 3;
    const uint32_t first = 2 * (c & 1);
    __half2 sc, mn;
    k_quant_half_scales(raw.meta, c >= 2, first, first + 1, sc, mn);
    scale[0] = __low2half2(sc);
    scale[1] = __high2half2(sc);
    min[0] = __low2half2(mn);
    min[1] = __high2half2(mn);
  }
  LS_FORMAT static void codes(const Raw& raw, LaneStep s, int k, uint32_t (&w)[4]) {
    F::codes(raw, s.u, k, w);
  }
  LS_FORMAT static void code_pairs(const Raw& raw, LaneStep s, int k,
                                   __half2 (&pairs)[8]) requires kHasCodePairs<F> {
    F::code_pairs(raw, s.u, k, pairs);
  }
  LS_FORMAT static int x_col(LaneStep s, int k, int half) { return F::run_base(s.u, k) + 8 * half; }
};

template <TensorType T>
struct QuadPieces;

// 8 bytes of weights, not allocated in L1 (as load_weights_16).
LS_FORMAT uint2 load_weights_8(const uint8_t* p) {
  uint2 r;
#if defined(__CUDA_ARCH__)
  asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
#else
  std::memcpy(&r, p, sizeof r);
#endif
  return r;
}

// Step t covers super-block t / 2, chunks c = 2 (t % 2) (half 0) and c + 1 (half 1); lane q
// takes bytes [8q, 8q + 8) of each chunk's 32: elements 8q .. 8q + 7 of sub-blocks 2c (low
// nibbles, run 0) and 2c + 1 (high nibbles, run 1).
template <>
struct QuadPieces<TensorType::Q4_K> {
  using F = Format<TensorType::Q4_K>;
  static constexpr int kRuns = 2;
  struct Raw {
    uint4 meta;
    uint2 half0, half1;
  };
  LS_FORMAT static Raw load(const DeviceMatrix& w, int64_t row, LaneStep s) {
    const uint8_t* block = quant_row(w, row) + (s.t >> 1) * F::kBlockBytes;
    const uint8_t* piece = block + 16 + 64 * (s.t & 1) + 8 * s.q;
    return {load_cached<uint4>(block), load_weights_8(piece), load_weights_8(piece + 32)};
  }
  LS_FORMAT static bool valid(LaneStep, int) { return true; }  // rows of whole super-blocks
  // Sub-blocks 4 (t % 2) .. 4 (t % 2) + 3: byte 2 half + k of k_quant_scale_bytes' words.
  LS_FORMAT static void scales(const Raw& raw, LaneStep s, float (&scale)[kRuns][2],
                               float (&min)[kRuns][2]) {
    uint32_t sc, mn;
    k_quant_scale_bytes(raw.meta, (s.t & 1) != 0, sc, mn);
    const float d = half_bits_to_float(raw.meta.x);
    const float dmin = half_bits_to_float(raw.meta.x >> 16);
    LS_UNROLL
    for (int half = 0; half < 2; ++half) {
      LS_UNROLL
      for (int k = 0; k < kRuns; ++k) {
        scale[k][half] = d * byte_as_float(sc, 2 * half + k, 0.0f);
        min[k][half] = -dmin * byte_as_float(mn, 2 * half + k, 0.0f);
      }
    }
  }
  // Run k: (half 0, half 1) = bytes k and 2 + k of the scale words.
  LS_FORMAT static void half_scales(const Raw& raw, LaneStep s, __half2 (&scale)[kRuns],
                                    __half2 (&min)[kRuns]) {
    LS_UNROLL
    for (int k = 0; k < kRuns; ++k) {
      k_quant_half_scales(raw.meta, (s.t & 1) != 0, k, 2 + k, scale[k], min[k]);
    }
  }
  LS_FORMAT static void code_pairs(const Raw& raw, LaneStep, int k, __half2 (&pairs)[8]) {
    nibble_run_pairs<0>(make_uint4(raw.half0.x, raw.half0.y, raw.half1.x, raw.half1.y), k, pairs);
  }
  LS_FORMAT static int x_col(LaneStep s, int k, int half) {
    return 128 * s.t + 64 * half + 32 * k + 8 * s.q;
  }
};

// Step t covers super-block t / 2, its half hf = t % 2 (128 elements); lane q takes l-bytes
// [8q, 8q + 8) of the half: ql chunk 0 (half 0) and 1 (half 1), both holding quarters s and s + 2
// (runs 0 and 1) of those l, and the qh bytes of the same l, which hold every quarter's top bits.
template <>
struct QuadPieces<TensorType::Q6_K> {
  using F = Format<TensorType::Q6_K>;
  static constexpr int kRuns = 2;
  struct Raw {
    uint2 ql0, ql1, qh;
    uint32_t sc;  // int8 scales: half 0 runs 0, 1, half 1 runs 0, 1
    float d;
  };
  LS_FORMAT static Raw load(const DeviceMatrix& w, int64_t row, LaneStep s) {
    const int hf = s.t & 1;
    const uint8_t* block = quant_row(w, row) + (s.t >> 1) * F::kBlockBytes;
    Raw raw;
    raw.ql0 = load_weights_8(block + 64 * hf + 8 * s.q);
    raw.ql1 = load_weights_8(block + 64 * hf + 32 + 8 * s.q);
    raw.qh = load_weights_8(block + 128 + 32 * hf + 8 * s.q);
    // Scale groups of 16 elements: 8 hf + 2 quarter + l-half (q / 2); quarters 0, 2 (half 0)
    // and 1, 3 (half 1).
    const uint2 sc = load_cached<uint2>(block + 192 + 8 * hf);
    const int h = s.q >> 1;
    raw.sc = byte_perm(sc.x, sc.y, 0x6240u + 0x1111u * static_cast<uint32_t>(h));
    raw.d = load_half(scale_row(w, row) + 2 * (s.t >> 1));
    return raw;
  }
  LS_FORMAT static bool valid(LaneStep, int) { return true; }  // rows of whole super-blocks
  LS_FORMAT static void scales(const Raw& raw, LaneStep, float (&scale)[kRuns][2],
                               float (&)[kRuns][2]) {
    LS_UNROLL
    for (int half = 0; half < 2; ++half) {
      LS_UNROLL
      for (int k = 0; k < kRuns; ++k) {
        const int8_t sc = static_cast<int8_t>(raw.sc >> (8 * (2 * half + k)));
        scale[k][half] = raw.d * static_cast<float>(sc);
      }
    }
  }
  LS_FORMAT static void codes(const Raw& raw, LaneStep, int k, uint32_t (&w)[4]) {
    LS_UNROLL
    for (int i = 0; i < 4; ++i) {
      const int half = i >> 1;  // quarter s = half
      const uint32_t ql =
          (i & 1) == 0 ? (half == 0 ? raw.ql0.x : raw.ql1.x) : (half == 0 ? raw.ql0.y : raw.ql1.y);
      const uint32_t qh = ((i & 1) == 0 ? raw.qh.x : raw.qh.y) >> (2 * half);
      w[i] = q6_k_codes(ql, qh, k);
    }
  }
  LS_FORMAT static int x_col(LaneStep s, int k, int half) {
    return 128 * s.t + 32 * half + 64 * k + 8 * s.q;
  }
};

// The 32-element block types, whose units are 16 bytes of codes (Q8_0 half a block, Q4_0 and
// Q4_1 a block) with a scale (and min) of the unit's block: half h of lane q's step is bytes
// [8 (q % 2), 8 (q % 2) + 8) of unit 4t + 2h + q / 2, each run's elements there.
template <TensorType T>
requires(T == TensorType::Q8_0 || T == TensorType::Q4_0 ||
         T == TensorType::Q4_1) struct QuadPieces<T> {
  using F = Format<T>;
  static constexpr int kRuns = F::kRuns;
  struct Raw {
    uint2 piece[2];     // the codes of half 0 and half 1
    uint32_t scale[2];  // each half's block: its f16 d (Q4_1: d low, m high)
  };
  // The half's unit, unclamped and as loaded.
  LS_FORMAT static int step_unit(LaneStep s, int half) { return 4 * s.t + 2 * half + (s.q >> 1); }
  LS_FORMAT static int unit(LaneStep s, int half) { return clamp_unit(s, step_unit(s, half)); }
  LS_FORMAT static bool valid(LaneStep s, int half) { return step_unit(s, half) < s.units; }
  LS_FORMAT static Raw load(const DeviceMatrix& w, int64_t row, LaneStep s) {
    Raw raw;
    LS_UNROLL
    for (int half = 0; half < 2; ++half) {
      const int u = unit(s, half);
      raw.piece[half] = load_weights_8(quant_row(w, row) + 16 * u + 8 * (s.q & 1));
      const uint8_t* scales = scale_row(w, row);
      raw.scale[half] = T == TensorType::Q4_1 ? load_cached<uint32_t>(scales + 4 * u)
                        : T == TensorType::Q4_0
                            ? load_cached<unsigned short>(scales + 2 * u)
                            : load_cached<unsigned short>(scales + 2 * (u >> 1));
    }
    return raw;
  }
  LS_FORMAT static void scales(const Raw& raw, LaneStep, float (&scale)[kRuns][2],
                               float (&min)[kRuns][2]) {
    LS_UNROLL
    for (int half = 0; half < 2; ++half) {
      LS_UNROLL
      for (int k = 0; k < kRuns; ++k) {
        scale[k][half] = half_bits_to_float(raw.scale[half]);
        if (F::kHasMin) min[k][half] = half_bits_to_float(raw.scale[half] >> 16);
      }
    }
  }
  // The halves' f16 scales (and mins) as stored: no rounding.
  LS_FORMAT static void half_scales(const Raw& raw, LaneStep, __half2 (&scale)[kRuns],
                                    __half2 (&min)[kRuns]) {
    const __half2 sc = bits_half2(byte_perm(raw.scale[0], raw.scale[1], 0x5410u));
    const __half2 mn = bits_half2(F::kHasMin ? byte_perm(raw.scale[0], raw.scale[1], 0x7632u) : 0u);
    LS_UNROLL
    for (int k = 0; k < kRuns; ++k) {
      scale[k] = sc;
      min[k] = mn;
    }
  }
  LS_FORMAT static void codes(const Raw& raw, LaneStep, int,
                              uint32_t (&w)[4]) requires(T == TensorType::Q8_0) {
    const uint32_t words[4] = {raw.piece[0].x, raw.piece[0].y, raw.piece[1].x, raw.piece[1].y};
    LS_UNROLL
    for (int i = 0; i < 4; ++i) w[i] = words[i] ^ 0x80808080u;  // as Format<Q8_0>::codes
  }
  LS_FORMAT static void code_pairs(const Raw& raw, LaneStep, int k,
                                   __half2 (&pairs)[8]) requires(T != TensorType::Q8_0) {
    nibble_run_pairs<static_cast<int>(F::kCodeBias)>(
        make_uint4(raw.piece[0].x, raw.piece[0].y, raw.piece[1].x, raw.piece[1].y), k, pairs);
  }
  LS_FORMAT static int x_col(LaneStep s, int k, int half) {
    return F::run_base(unit(s, half), k) + 8 * (s.q & 1);
  }
};

// A lane's f16 scales and mins of run k's halves: half_scales where the lanes have it, else the
// fp32 scales rounded to f16.
template <class L, class Raw, int R>
LS_FORMAT void lane_half_scales(const Raw& raw, LaneStep s, __half2 (&scale)[R],
                                __half2 (&min)[R]) {
  if constexpr (requires { L::half_scales(raw, s, scale, min); }) {
    L::half_scales(raw, s, scale, min);
  } else {
    float sc[R][2], mn[R][2] = {};
    L::scales(raw, s, sc, mn);
    LS_UNROLL
    for (int k = 0; k < R; ++k) {
      scale[k] = __floats2half2_rn(sc[k][0], sc[k][1]);
      min[k] = __floats2half2_rn(mn[k][0], mn[k][1]);
    }
  }
}

// A lane's run k as exact f16 pairs minus kCodeBias (pair p: elements 2p and 2p + 1 of the run):
// code_pairs where the lanes have it, else codes() a byte pair at a time (bytes_as_half2: a byte
// permute and a subtraction a pair; bytes 0, 2 and 1, 3 of a word in pair order).
template <class L, class Raw>
LS_FORMAT void lane_code_pairs(const Raw& raw, LaneStep s, int k, __half2 (&pairs)[8]) {
  if constexpr (requires { L::code_pairs(raw, s, k, pairs); }) {
    L::code_pairs(raw, s, k, pairs);
  } else {
    uint32_t w[4];
    L::codes(raw, s, k, w);
    LS_UNROLL
    for (int i = 0; i < 4; ++i) {
      pairs[2 * i] = bytes_as_half2(w[i], 0, 2, L::F::kCodeBias);
      pairs[2 * i + 1] = bytes_as_half2(w[i], 1, 3, L::F::kCodeBias);
    }
  }
}

// The lanes' layout of a pass of NT tiles of 8 activation rows: pieces from 6 tiles on, where the
// activation loads weigh most; below, whole units (each lane works out twice the scales and
// issues twice the weight loads with pieces, which cost more than the activation loads save:
// bench/results/2026-12-03-h200-quant-mma-quad-pieces.md).
template <TensorType T>
inline constexpr bool kQuadPieces =
    T == TensorType::Q8_0 || T == TensorType::Q4_0 || T == TensorType::Q4_1 ||
    T == TensorType::Q4_K || T == TensorType::Q6_K;
template <TensorType T, int NT>
using MmaLanes = std::conditional_t<kQuadPieces<T> && (NT > 4), QuadPieces<T>, WholeUnits<T>>;

}  // namespace llamaserve::cuda
