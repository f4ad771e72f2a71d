#include "backend/cuda/check.h"
#include "backend/cuda/dequant.h"
#include "backend/cuda/formats.cuh"
#include "backend/cuda/launch.cuh"

namespace llamaserve::cuda {
namespace {

constexpr int kDequantThreads = 256;

template <typename Out>
__device__ __forceinline__ Out convert(float v);
template <>
__device__ __forceinline__ float convert<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half convert<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 convert<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Stores n (4, 8 or 16) values with 8- or 16-byte stores. PRECONDITION: dst is aligned to
// n * sizeof(Out) or to 16 bytes, whichever is smaller.
template <typename Out, int N>
__device__ __forceinline__ void store_run(Out* dst, const float (&v)[N]) {
  __align__(16) Out converted[N];
#pragma unroll
  for (int i = 0; i < N; ++i) converted[i] = convert<Out>(v[i]);
  constexpr int kBytes = N * static_cast<int>(sizeof(Out));
  if constexpr (kBytes % 16 == 0) {
#pragma unroll
    for (int i = 0; i < kBytes / 16; ++i) {
      reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(converted)[i];
    }
  } else {
    static_assert(kBytes == 8);
    *reinterpret_cast<uint2*>(dst) = *reinterpret_cast<const uint2*>(converted);
  }
}

// One thread per unit of one row.
template <TensorType T, typename Out>
__global__ void __launch_bounds__(kDequantThreads)
    dequantize_rows_kernel(const DequantArgs a, int units_per_row) {
  pdl_launch_dependents();
  pdl_wait();
  using F = Format<T>;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kDequantThreads + threadIdx.x;
  if (i >= a.n_rows * units_per_row) return;
  const int64_t out_row = i / units_per_row;
  const int u = static_cast<int>(i % units_per_row);
  int64_t row =
      a.row_ids != nullptr ? static_cast<int64_t>(a.row_ids[out_row]) : a.first_row + out_row;
  row = min(max(row, int64_t{0}), a.w.rows - 1);
  const typename F::Raw raw = F::load(a.w, row, u);
  Out* dst = static_cast<Out*>(a.dst) + out_row * a.dst_stride;
  __align__(16) float q[F::kRunLen];
#pragma unroll
  for (int k = 0; k < F::kRuns; ++k) {
    float scale = 1.0f, min_value = 0.0f;
    F::decode(raw, u, k, q, scale, min_value);
    dequantize_run<F>(q, scale, min_value);
    store_run<Out, F::kRunLen>(dst + F::run_base(u, k), q);
  }
}

template <TensorType T, typename Out>
Status launch(const DequantArgs& a, LaunchStream stream) {
  const int units = static_cast<int>(a.w.cols / kUnitElems<T>);
  const int64_t blocks = (a.n_rows * units + kDequantThreads - 1) / kDequantThreads;
  LS_CUDA_REQUIRE(blocks <= 0x7fffffff);
  LS_CUDA_CHECK(launch_kernel(dequantize_rows_kernel<T, Out>, static_cast<unsigned>(blocks),
                              kDequantThreads, 0, stream, a, units));
  return Status::ok();
}

}  // namespace

Status dequantize_rows(const DequantArgs& a, LaunchStream stream) {
  LS_CUDA_REQUIRE(a.w.quants != nullptr && a.dst != nullptr);
  LS_CUDA_REQUIRE(a.n_rows >= 0 && a.dst_stride >= a.w.cols && a.dst_stride % 8 == 0);
  LS_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(a.dst) % 16 == 0);
  LS_CUDA_REQUIRE(a.row_ids != nullptr || a.first_row + a.n_rows <= a.w.rows);
  if (a.n_rows == 0) return Status::ok();
  return dispatch_weight_type(a.w.type, "dequantize_rows", [&]<TensorType T>() {
    switch (a.out_type) {
      case DequantOut::kF16: return launch<T, __half>(a, stream);
      case DequantOut::kBF16: return launch<T, __nv_bfloat16>(a, stream);
      default: return launch<T, float>(a, stream);
    }
  });
}

}  // namespace llamaserve::cuda
