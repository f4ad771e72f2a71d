#include <algorithm>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/check.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/half_rows.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/swiglu.cuh"

namespace llamaserve::cuda {
namespace {

constexpr int kThreads = 256;

// Grid: x over columns (kThreads per block), y over rows (folded when there are more than
// the 65535 a grid's y dimension allows).
struct Grid2d {
  dim3 grid;
  static Grid2d make(int64_t n_rows, int64_t n) {
    const int64_t col_blocks = (n + kThreads - 1) / kThreads;
    return {dim3(static_cast<unsigned>(col_blocks),
                 static_cast<unsigned>(std::min<int64_t>(n_rows, 65535)))};
  }
};

template <class Op>
__global__ void rows_kernel(int64_t n_rows, int64_t n, Op op) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= n) return;
  for (int64_t r = blockIdx.y; r < n_rows; r += gridDim.y) op(r, c);
}

template <class Op>
Status launch_rows(int64_t n_rows, int64_t n, Op op, LaunchStream stream) {
  LS_CUDA_REQUIRE(n_rows >= 0 && n >= 0);
  if (n_rows == 0 || n == 0) return Status::ok();
  LS_CUDA_REQUIRE((n + kThreads - 1) / kThreads <= 0x7fffffff);
  const Grid2d g = Grid2d::make(n_rows, n);
  LS_CUDA_CHECK(launch_kernel(rows_kernel<Op>, g.grid, kThreads, 0, stream, n_rows, n, op));
  return Status::ok();
}

// Ops over four consecutive elements (quad c4: elements 4 c4 to 4 c4 + 3) where the rows allow
// 16-byte loads and 8-byte stores: a conversion to halves moves its bytes at about twice the
// rate of one element per thread.
template <class Op>
__global__ void quads_kernel(int64_t n_rows, int64_t n_quads, Op op) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t c4 = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c4 >= n_quads) return;
  for (int64_t r = blockIdx.y; r < n_rows; r += gridDim.y) op.quad(r, 4 * c4);
}

bool quad_aligned(const void* p, int64_t stride, int64_t element_bytes, int64_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0 &&
         (stride * element_bytes) % alignment == 0;
}

// Op's quads where n and the rows allow (16-byte float rows in, 8-byte half rows out), else its
// single elements.
template <class Op>
Status launch_half_rows(int64_t n_rows, int64_t n, Op op, bool quads, LaunchStream stream) {
  if (!quads || n % 4 != 0) return launch_rows(n_rows, n, op, stream);
  LS_CUDA_REQUIRE(n_rows >= 0 && n >= 0);
  if (n_rows == 0 || n == 0) return Status::ok();
  const Grid2d g = Grid2d::make(n_rows, n / 4);
  LS_CUDA_CHECK(launch_kernel(quads_kernel<Op>, g.grid, kThreads, 0, stream, n_rows, n / 4, op));
  return Status::ok();
}

struct ToHalf {
  const float* x;
  int64_t x_stride;
  HalfRows dst;
  __device__ void operator()(int64_t r, int64_t c) const {
    store_half(dst, r, c, x[r * x_stride + c]);
  }
  __device__ void quad(int64_t r, int64_t c) const {
    store_half4(dst, r, c, *reinterpret_cast<const float4*>(x + r * x_stride + c));
  }
  bool quads() const {
    return quad_aligned(x, x_stride, 4, 16) && quad_aligned(dst.data, dst.stride, 2, 8);
  }
};

struct SiluMul {
  const float* gate;
  int64_t gate_stride;
  const float* up;
  int64_t up_stride;
  float* out;
  int64_t out_stride;
  __device__ float value(int64_t r, int64_t c) const {
    return silu_times(gate[r * gate_stride + c], up[r * up_stride + c]);
  }
  __device__ void operator()(int64_t r, int64_t c) const { out[r * out_stride + c] = value(r, c); }
};

struct SiluMulToHalf {
  SiluMul op;
  HalfRows out;
  __device__ void operator()(int64_t r, int64_t c) const { store_half(out, r, c, op.value(r, c)); }
  __device__ void quad(int64_t r, int64_t c) const {
    const float4 g = *reinterpret_cast<const float4*>(op.gate + r * op.gate_stride + c);
    const float4 u = *reinterpret_cast<const float4*>(op.up + r * op.up_stride + c);
    store_half4(out, r, c,
                make_float4(silu_times(g.x, u.x), silu_times(g.y, u.y), silu_times(g.z, u.z),
                            silu_times(g.w, u.w)));
  }
  bool quads() const {
    return quad_aligned(op.gate, op.gate_stride, 4, 16) &&
           quad_aligned(op.up, op.up_stride, 4, 16) && quad_aligned(out.data, out.stride, 2, 8);
  }
};

// silu_mul with 8-bit output: the columns of a CTA are whole blocks, one per warp.
__global__ void __launch_bounds__(kThreads)
    silu_mul_q8_kernel(SiluMul op, int64_t n_rows, int64_t n, Q8Rows out_q) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= n) return;  // whole warps, since n % 32 == 0
  const int lane = threadIdx.x & 31;
  for (int64_t r = blockIdx.y; r < n_rows; r += gridDim.y) {
    const float v = op.value(r, c);
    op.out[r * op.out_stride + c] = v;
    quantize_q8_warp(v, lane, out_q.qs + r * out_q.qs_stride + (c - lane),
                     out_q.ds + r * out_q.ds_stride + c / kQ8Block);
  }
}

struct AddInplace {
  float* x;
  int64_t x_stride;
  const float* y;
  int64_t y_stride;
  __device__ void operator()(int64_t r, int64_t c) const {
    x[r * x_stride + c] += y[r * y_stride + c];
  }
};

template <typename Half>
struct AddHalf {
  float* x;
  int64_t x_stride;
  const Half* y;
  int64_t y_stride;
  __device__ void operator()(int64_t r, int64_t c) const {
    x[r * x_stride + c] += static_cast<float>(y[r * y_stride + c]);
  }
};

struct AddBias {
  float* y;
  int64_t y_stride;
  const float* bias;
  __device__ void operator()(int64_t r, int64_t c) const { y[r * y_stride + c] += bias[c]; }
};

struct Gather {
  const float* src;
  int64_t src_stride;
  const int32_t* row_ids;
  float* dst;
  int64_t dst_stride;
  __device__ void operator()(int64_t r, int64_t c) const {
    dst[r * dst_stride + c] = src[static_cast<int64_t>(row_ids[r]) * src_stride + c];
  }
};

}  // namespace

Status convert_to_half(const float* x, int64_t x_stride, int64_t n_rows, int64_t n, void* dst,
                       int64_t dst_stride, HalfType type, LaunchStream stream) {
  LS_CUDA_REQUIRE(x != nullptr && dst != nullptr && dst_stride >= n && x_stride >= n);
  const ToHalf op{x, x_stride, HalfRows{dst, dst_stride, type}};
  return launch_half_rows(n_rows, n, op, op.quads(), stream);
}

Status silu_mul(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride,
                int64_t n_rows, int64_t n, float* out, int64_t out_stride, LaunchStream stream,
                const Q8Rows& out_q, const HalfRows& out_half) {
  LS_CUDA_REQUIRE(gate != nullptr && up != nullptr && (out != nullptr || out_half.data != nullptr));
  const SiluMul op{gate, gate_stride, up, up_stride, out, out_stride};
  if (out_half.data != nullptr) {
    LS_CUDA_REQUIRE(out_q.qs == nullptr && out_half.stride >= n && out_half.stride % 2 == 0);
    const SiluMulToHalf to_half{op, out_half};
    return launch_half_rows(n_rows, n, to_half, to_half.quads(), stream);
  }
  LS_CUDA_REQUIRE(out != nullptr);
  if (out_q.qs == nullptr) return launch_rows(n_rows, n, op, stream);
  LS_CUDA_REQUIRE(n % kQ8Block == 0 && out_q.ds != nullptr && out_q.qs_stride % 16 == 0 &&
                  out_q.qs_stride >= n && n_rows >= 0);
  if (n_rows == 0 || n == 0) return Status::ok();
  const Grid2d g = Grid2d::make(n_rows, n);
  LS_CUDA_CHECK(
      launch_kernel(silu_mul_q8_kernel, g.grid, kThreads, 0, stream, op, n_rows, n, out_q));
  return Status::ok();
}

Status add_inplace(float* x, int64_t x_stride, const float* y, int64_t y_stride, int64_t n_rows,
                   int64_t n, LaunchStream stream) {
  LS_CUDA_REQUIRE(x != nullptr && y != nullptr);
  return launch_rows(n_rows, n, AddInplace{x, x_stride, y, y_stride}, stream);
}

Status add_half(float* x, int64_t x_stride, const void* y, int64_t y_stride, HalfType type,
                int64_t n_rows, int64_t n, LaunchStream stream) {
  LS_CUDA_REQUIRE(x != nullptr && y != nullptr);
  if (type == HalfType::kF16) {
    return launch_rows(
        n_rows, n, AddHalf<__half>{x, x_stride, static_cast<const __half*>(y), y_stride}, stream);
  }
  return launch_rows(
      n_rows, n,
      AddHalf<__nv_bfloat16>{x, x_stride, static_cast<const __nv_bfloat16*>(y), y_stride}, stream);
}

Status add_bias(float* y, int64_t y_stride, const float* bias, int64_t n_rows, int64_t n,
                LaunchStream stream) {
  LS_CUDA_REQUIRE(y != nullptr && bias != nullptr);
  return launch_rows(n_rows, n, AddBias{y, y_stride, bias}, stream);
}

Status gather_rows(const float* src, int64_t src_stride, const int32_t* row_ids, int64_t n_rows,
                   int64_t n, float* dst, int64_t dst_stride, LaunchStream stream) {
  LS_CUDA_REQUIRE(src != nullptr && row_ids != nullptr && dst != nullptr);
  return launch_rows(n_rows, n, Gather{src, src_stride, row_ids, dst, dst_stride}, stream);
}

}  // namespace llamaserve::cuda
