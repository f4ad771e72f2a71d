#include "backend/cuda/quant_mma.h"

#include <algorithm>

#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/check.h"
#include "backend/cuda/formats.cuh"
#include "backend/cuda/half_rows.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/matvec.h"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/quant_mma_lanes.cuh"
#include "backend/cuda/swiglu.cuh"

namespace llamaserve::cuda {
namespace {

// Warps a CTA: 16 up to two tiles of activation rows (more loads in flight; their registers
// allow it), 8 beyond and for Q5_K (whose loads of four rows take 80 registers: at 16 warps,
// 128 registers a thread, it spills).
template <TensorType T, int NT>
constexpr int kWarps = NT <= 2 && T != TensorType::Q5_K ? 16 : 8;
constexpr int kTileRows = 32;   // weight rows a CTA: two mma tiles of 16
constexpr int kLaneRows = 4;    // rows a lane decodes: g, g + 8, g + 16, g + 24
constexpr int kUnitsAStep = 4;  // one unit per lane of a quad
// Whether the activations go through a ring in shared memory (quant_mma_kernel), of kRingSlots
// half runs (8 elements a lane) a warp.
template <int NT>
constexpr bool kRing = NT > 4;
constexpr int kRingSlots = 4;
// Dynamic shared memory of a CTA: its warps' rings of activations.
template <TensorType T, int NT>
constexpr int kRingBytes = kRing<NT> ? kWarps<T, NT>* kRingSlots* NT * 32 * 16 : 0;
// Types whose rows are whole steps (super-blocks of 8 units): no lane of a step is past the row.
template <TensorType T>
constexpr bool kWholeSteps =
    T == TensorType::Q4_K || T == TensorType::Q5_K || T == TensorType::Q6_K;

// A run's weights as f16 pairs (elements 2p, 2p + 1 in pair p) from its codes as exact f16 pairs
// (lane_code_pairs: each code byte becomes the half 1024 + code, one byte permute a pair, and the
// bias 1024 + kCodeBias is subtracted exactly; Q4_K's codes need no permute): one f16 multiply
// or fma applies the scale (and min) of the run's half (the low and high halves of `scales` and
// `mins`), both rounded to f16 once per run. About 1.6 instructions a weight against 4 for the
// fp32 decode.
template <class F>
__device__ __forceinline__ void decode_half_run(const __half2 (&codes)[8], __half2 scales,
                                                __half2 mins, uint32_t (&w)[F::kRunLen / 2]) {
#pragma unroll
  for (int p = 0; p < 8; ++p) {
    const __half2 scale = p < 4 ? __low2half2(scales) : __high2half2(scales);
    const __half2 min = p < 4 ? __low2half2(mins) : __high2half2(mins);
    w[p] = half2_bits(F::kHasMin ? __hfma2(codes[p], scale, min) : __hmul2(codes[p], scale));
  }
}

// One pass: the CTA's 32 weight rows times up to 8 * NT activation rows; with kSwiGlu, 16 gate
// rows and their up rows, written as SwiGLU's halves (QuantMmaArgs::swiglu).
template <TensorType T, int NT, bool kSwiGlu>
__global__ void __launch_bounds__(32 * kWarps<T, NT>)
    quant_mma_kernel(const __grid_constant__ QuantMmaArgs a, int units, int steps) {
  using F = Format<T>;
  using L = MmaLanes<T, NT>;
  using Raw = typename L::Raw;
  static_assert(F::kRunLen == 16);
  // The warps' partial sums of one m tile at a time: [warp][n tile, fragment value][lane].
  __shared__ float partial[kWarps<T, NT>][NT * 4][32];
  pdl_launch_dependents();
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int q = lane & 3;
  // The CTA's 32 weight rows: 32 consecutive ones, or with SwiGLU output 16 gate rows from row0
  // (m tile 0) and the up rows of the same columns (m tile 1).
  const int64_t out_rows = kSwiGlu ? a.w.rows / 2 : a.w.rows;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * (kSwiGlu ? kTileRows / 2 : kTileRows);
  int64_t rows[kLaneRows];
#pragma unroll
  for (int i = 0; i < kLaneRows; ++i) {
    rows[i] = kSwiGlu ? min(row0 + g + 8 * (i % 2), out_rows - 1) + (i < 2 ? 0 : out_rows)
                      : min(row0 + g + 8 * i, out_rows - 1);
  }
  // The warp's steps: a contiguous share of the row's units.
  const int t_begin = static_cast<int>(static_cast<int64_t>(steps) * warp / kWarps<T, NT>);
  const int t_end = static_cast<int>(static_cast<int64_t>(steps) * (warp + 1) / kWarps<T, NT>);
  auto lane_step = [&](int t) {
    return LaneStep{t, q, min(kUnitsAStep * t + q, units - 1), units};
  };
  auto load = [&](int t, Raw(&raw)[kLaneRows]) {
    const LaneStep s = lane_step(t);
#pragma unroll
    for (int i = 0; i < kLaneRows; ++i) raw[i] = L::load(a.w, rows[i], s);
  };
  float acc[2][NT][4];
#pragma unroll
  for (int m = 0; m < 2; ++m) {
#pragma unroll
    for (int n = 0; n < NT; ++n) {
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[m][n][j] = 0.0f;
    }
  }
  Raw raw[kLaneRows];
  // The weights are constant: the first step's loads go out before the wait for the kernel
  // that writes the activations (launch.cuh).
  if (t_begin < t_end) load(t_begin, raw);
  pdl_wait();
  // The activations a lane meets, half a run at a time (one 16-byte load a row tile). With up to
  // 4 tiles a run's are loaded into registers before its decode, which hides their latency (and
  // the 16 or 32 rows stay in L1 for the SM's next CTA). With more, registers are short (252
  // with 8 tiles, one CTA an SM) and the second half waited after the decode: they go through
  // the warp's ring of kRingSlots half runs by cp.async, kRingSlots - 1 ahead, which hides their
  // latency without registers. Each lane reads back only what it copied itself, so no barrier
  // orders the ring.
  constexpr int kStepHalves = 2 * F::kRuns;
  static_assert(kRingSlots % kStepHalves == 0);
  extern __shared__ uint4 quant_mma_ring[];
  uint4* ring = quant_mma_ring + warp * kRingSlots * NT * 32 + lane;
  auto slot = [](int t, int p) { return (t * kStepHalves + p) % kRingSlots; };
  // The lane's activation row of each tile (the last row for tiles past n_rows: finite values
  // whose products are not stored).
  const __half* x = static_cast<const __half*>(a.x_half);
  uint32_t x_rows[NT];  // element offsets (a pass is at most 64 rows of 32-bit-sized strides)
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    x_rows[n] =
        static_cast<uint32_t>(min(static_cast<int64_t>(8 * n + g), a.n_rows - 1) * a.x_stride);
  }
  // Half run p of step t into its slot, always the one consumed last; past the warp's steps it
  // copies the last step's again (no branch in the loop; never read).
  auto stage = [&](int t, int p) {
    const int col = L::x_col(lane_step(min(t, t_end - 1)), p / 2, p % 2);
    uint4* dst = ring + slot(t, p) * NT * 32;
#pragma unroll
    for (int n = 0; n < NT; ++n) cp_async_16(dst + 32 * n, x + (x_rows[n] + col));
    cp_async_commit();
  };
  if (kRing<NT> && t_begin < t_end) {
#pragma unroll
    for (int i = 0; i < kRingSlots - 1; ++i) stage(t_begin + i / kStepHalves, i % kStepHalves);
  }
  for (int t = t_begin; t < t_end; ++t) {
    Raw next[kLaneRows];
    if (t + 1 < t_end) load(t + 1, next);
    const LaneStep step = lane_step(t);
    // Each run's scales (and mins) of its two halves, in the low and high halves of a half2.
    __half2 scale[kLaneRows][F::kRuns], min_value[kLaneRows][F::kRuns];
#pragma unroll
    for (int i = 0; i < kLaneRows; ++i) {
      lane_half_scales<L>(raw[i], step, scale[i], min_value[i]);
    }
#pragma unroll
    for (int k = 0; k < F::kRuns; ++k) {
      uint4 x_run[2][NT];  // without the ring: the run's two halves
      if constexpr (!kRing<NT>) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int col = L::x_col(step, k, half);
#pragma unroll
          for (int n = 0; n < NT; ++n) {
            x_run[half][n] = __ldg(reinterpret_cast<const uint4*>(x + (x_rows[n] + col)));
          }
        }
      }
      uint32_t w[kLaneRows][F::kRunLen / 2];
#pragma unroll
      for (int i = 0; i < kLaneRows; ++i) {
        __half2 codes[8];
        lane_code_pairs<L>(raw[i], step, k, codes);
        decode_half_run<F>(codes, scale[i][k], min_value[i][k], w[i]);
      }
      // Half `half` of the run meets the mma k-steps s = 2 half, 2 half + 1.
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int p = 2 * k + half;
        const uint4* staged = ring + slot(t, p) * NT * 32;
        if constexpr (kRing<NT>) {
          // kRingSlots - 1 half runs ahead: into the slot consumed just before this one.
          constexpr int kAhead = kRingSlots - 1;
          stage(t + (p + kAhead) / kStepHalves, (p + kAhead) % kStepHalves);
          cp_async_wait<kAhead>();  // half run p of step t has landed
        }
        // The row's last step may hold fewer than four units: the lanes past it repeat the
        // last unit (finite weights) against zero activations. K-quant rows are whole
        // super-blocks of 8 units, so every step is full.
        const bool valid = kWholeSteps<T> || L::valid(step, half);
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          const uint4 v = kRing<NT> ? staged[32 * n] : x_run[half][n];
#pragma unroll
          for (int s = 2 * half; s < 2 * half + 2; ++s) {
            const uint32_t b0 = (s & 1) == 0 ? v.x : v.z;
            const uint32_t b1 = (s & 1) == 0 ? v.y : v.w;
#pragma unroll
            for (int m = 0; m < 2; ++m) {
              const uint32_t frag[4] = {w[2 * m][2 * s], w[2 * m + 1][2 * s], w[2 * m][2 * s + 1],
                                        w[2 * m + 1][2 * s + 1]};
              mma_16816(acc[m][n], frag, valid ? b0 : 0u, valid ? b1 : 0u);
            }
          }
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kLaneRows; ++i) raw[i] = next[i];
  }
  // Fragment value j of lane (g, q) in tile (m, n): weight row 16 m + g + 8 (j / 2) of the
  // CTA's, activation row 8 n + 2 q + j % 2. The warps' partials are added one m tile at a time,
  // in warp order; a thread's values are the same ones in both tiles, so with SwiGLU output it
  // keeps its gate sums for the up sums of the same columns.
  constexpr int kValues = NT * 4 * 32;
  constexpr int kThreadValues = (kValues + 32 * kWarps<T, NT> - 1) / (32 * kWarps<T, NT>);
  float gate_sum[kThreadValues];
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    if (m > 0) __syncthreads();  // the previous tile's sums have been read
#pragma unroll
    for (int n = 0; n < NT; ++n) {
#pragma unroll
      for (int j = 0; j < 4; ++j) partial[warp][n * 4 + j][lane] = acc[m][n][j];
    }
    __syncthreads();
#pragma unroll
    for (int v = 0; v < kThreadValues; ++v) {
      const int idx = threadIdx.x + v * 32 * kWarps<T, NT>;
      if (idx >= kValues) break;
      const int value = idx >> 5;
      const int l = idx & 31;
      float sum = 0.0f;
#pragma unroll
      for (int wp = 0; wp < kWarps<T, NT>; ++wp) sum += partial[wp][value][l];
      const int n = value / 4;
      const int j = value % 4;
      const int64_t b = 8 * n + 2 * (l & 3) + (j & 1);
      if constexpr (kSwiGlu) {
        const int64_t column = row0 + (l >> 2) + 8 * (j >> 1);
        if (m == 0) {
          gate_sum[v] = sum;
        } else if (column < out_rows && b < a.n_rows) {
          store_half(a.swiglu, b, column, silu_times(gate_sum[v], sum));
        }
        continue;
      }
      const int64_t row = row0 + 16 * m + (l >> 2) + 8 * (j >> 1);
      if (row >= a.w.rows || b >= a.n_rows) continue;
      if (a.y_half != nullptr) {
        static_cast<__half*>(a.y_half)[b * a.y_stride + row] = __float2half_rn(sum);
      } else {
        if (a.bias != nullptr) sum += a.bias[row];
        float* y = a.y + b * a.y_stride + row;
        *y = a.accumulate ? *y + sum : sum;
      }
    }
  }
}

// One pass of up to 8 * NT activation rows, on kWarps<T, NT> warps a CTA.
template <TensorType T, int NT, bool kSwiGlu>
Status launch_pass(const QuantMmaArgs& pass, int64_t ctas, int64_t units, int64_t steps,
                   LaunchStream stream) {
  LS_CUDA_CHECK(launch_kernel(quant_mma_kernel<T, NT, kSwiGlu>, static_cast<unsigned>(ctas),
                              32 * kWarps<T, NT>, kRingBytes<T, NT>, stream, pass,
                              static_cast<int>(units), static_cast<int>(steps)));
  return Status::ok();
}

template <TensorType T, bool kSwiGlu = false>
Status launch_passes(const QuantMmaArgs& args, LaunchStream stream) {
  const int64_t units = args.w.cols / kUnitElems<T>;
  LS_CUDA_REQUIRE(units * kUnitElems<T> == args.w.cols && units <= 0x7fffffff);
  // K-quant rows take every step whole (a super-block is 8 units).
  LS_CUDA_REQUIRE(!kWholeSteps<T> || units % kUnitsAStep == 0);
  const int64_t steps = (units + kUnitsAStep - 1) / kUnitsAStep;
  // A CTA's output rows: 32, or 16 columns of SwiGLU output (its gate and up rows).
  const int64_t out_rows = kSwiGlu ? args.w.rows / 2 : args.w.rows;
  const int64_t tile_rows = kSwiGlu ? kTileRows / 2 : kTileRows;
  const int64_t ctas = (out_rows + tile_rows - 1) / tile_rows;
  LS_CUDA_REQUIRE(ctas <= 0x7fffffff);
  for (int64_t first = 0; first < args.n_rows; first += kQuantMmaRows) {
    QuantMmaArgs pass = args;
    pass.n_rows = std::min<int64_t>(kQuantMmaRows, args.n_rows - first);
    pass.x_half = static_cast<const __half*>(args.x_half) + first * args.x_stride;
    if (kSwiGlu) {
      pass.swiglu.data = static_cast<__half*>(args.swiglu.data) + first * args.swiglu.stride;
    } else if (args.y_half != nullptr) {
      pass.y_half = static_cast<__half*>(args.y_half) + first * args.y_stride;
    } else {
      pass.y = args.y + first * args.y_stride;
    }
    // Tiles of 8 activation rows: 5 and 7 run as 6 and 8 (fewer kernels to build).
    switch ((pass.n_rows + 7) / 8) {
      case 1:
        LS_RETURN_IF_ERROR((launch_pass<T, 1, kSwiGlu>(pass, ctas, units, steps, stream)));
        break;
      case 2:
        LS_RETURN_IF_ERROR((launch_pass<T, 2, kSwiGlu>(pass, ctas, units, steps, stream)));
        break;
      case 3:
        LS_RETURN_IF_ERROR((launch_pass<T, 3, kSwiGlu>(pass, ctas, units, steps, stream)));
        break;
      case 4:
        LS_RETURN_IF_ERROR((launch_pass<T, 4, kSwiGlu>(pass, ctas, units, steps, stream)));
        break;
      case 5:
      case 6:
        LS_RETURN_IF_ERROR((launch_pass<T, 6, kSwiGlu>(pass, ctas, units, steps, stream)));
        break;
      default:
        LS_RETURN_IF_ERROR((launch_pass<T, 8, kSwiGlu>(pass, ctas, units, steps, stream)));
        break;
    }
  }
  return Status::ok();
}

// The pass widths with a ring (6 and 8 tiles) of one type and output: their dynamic shared
// memory allowed (the others take none).
template <TensorType T, bool kSwiGlu>
Status configure_type() {
  static_assert(kRing<6> && kRing<8> && !kRing<4>);
  LS_CUDA_CHECK(cudaFuncSetAttribute(quant_mma_kernel<T, 6, kSwiGlu>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     kRingBytes<T, 6>));
  LS_CUDA_CHECK(cudaFuncSetAttribute(quant_mma_kernel<T, 8, kSwiGlu>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     kRingBytes<T, 8>));
  return Status::ok();
}

}  // namespace

Status configure_quant_mma_kernels() {
  LS_RETURN_IF_ERROR((configure_type<TensorType::Q8_0, false>()));
  LS_RETURN_IF_ERROR((configure_type<TensorType::Q4_0, false>()));
  LS_RETURN_IF_ERROR((configure_type<TensorType::Q4_1, false>()));
  LS_RETURN_IF_ERROR((configure_type<TensorType::Q4_K, false>()));
  LS_RETURN_IF_ERROR((configure_type<TensorType::Q5_K, false>()));
  LS_RETURN_IF_ERROR((configure_type<TensorType::Q6_K, false>()));
  LS_RETURN_IF_ERROR((configure_type<TensorType::Q4_K, true>()));
  return configure_type<TensorType::Q5_K, true>();
}

// The quantized types: those whose matvec meets 8-bit activations.
bool quant_mma_supported(TensorType type) { return matvec_uses_q8(type); }

bool quant_mma_swiglu_supported(TensorType type) {
  return type == TensorType::Q4_K || type == TensorType::Q5_K;
}

Status quant_mma(const QuantMmaArgs& a, LaunchStream stream) {
  LS_CUDA_REQUIRE(quant_mma_supported(a.w.type) && a.w.quants != nullptr && a.x_half != nullptr);
  const bool swiglu = a.swiglu.data != nullptr;
  const bool halves = swiglu || a.y_half != nullptr;
  LS_CUDA_REQUIRE(halves ? a.y == nullptr && a.bias == nullptr && !a.accumulate : a.y != nullptr);
  LS_CUDA_REQUIRE(!swiglu || (quant_mma_swiglu_supported(a.w.type) && a.y_half == nullptr &&
                              a.w.rows % 2 == 0 && a.swiglu.stride >= a.w.rows / 2));
  LS_CUDA_REQUIRE(a.n_rows >= 0 && a.x_stride >= a.w.cols && a.x_stride % 8 == 0 &&
                  (swiglu || a.y_stride >= a.w.rows));
  LS_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(a.x_half) % 16 == 0);
  if (a.n_rows == 0) return Status::ok();
  if (swiglu) {
    return a.w.type == TensorType::Q4_K ? launch_passes<TensorType::Q4_K, true>(a, stream)
                                        : launch_passes<TensorType::Q5_K, true>(a, stream);
  }
  switch (a.w.type) {
    case TensorType::Q8_0: return launch_passes<TensorType::Q8_0>(a, stream);
    case TensorType::Q4_0: return launch_passes<TensorType::Q4_0>(a, stream);
    case TensorType::Q4_1: return launch_passes<TensorType::Q4_1>(a, stream);
    case TensorType::Q4_K: return launch_passes<TensorType::Q4_K>(a, stream);
    case TensorType::Q5_K: return launch_passes<TensorType::Q5_K>(a, stream);
    default: return launch_passes<TensorType::Q6_K>(a, stream);
  }
}

}  // namespace llamaserve::cuda
