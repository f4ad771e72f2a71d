#include "backend/cuda/gemm.h"

#include <algorithm>
#include <cstdint>

#include "backend/cuda/check.h"
#include "backend/cuda/dequant.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/quant_mma.h"

namespace llamaserve::cuda {
namespace {

int64_t padded_cols(int64_t cols) { return (cols + 7) / 8 * 8; }

// Y[:, first_row : first_row + m] (+)= A · X^T in cuBLAS's column-major terms: A is the
// weight slice (row-major rows × cols = column-major cols × rows, hence OP_T), X^T is the
// activations (column-major cols × n_rows).
Status gemm_slice(cublasHandle_t handle, const void* a, int64_t lda, int64_t m, const GemmArgs& g,
                  const void* x_half, int64_t ldx, cudaDataType_t half_type, void* y,
                  cudaDataType_t y_type, float beta) {
  const float alpha = 1.0f;
  LS_CUDA_REQUIRE(m <= 0x7fffffff && g.n_rows <= 0x7fffffff && g.w.cols <= 0x7fffffff);
  LS_CUBLAS_CHECK(
      cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m),
                   static_cast<int>(g.n_rows), static_cast<int>(g.w.cols), &alpha, a, half_type,
                   static_cast<int>(lda), x_half, half_type, static_cast<int>(ldx), &beta, y,
                   y_type, static_cast<int>(g.y_stride), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return Status::ok();
}

// GemmArgs::swiglu from the product's fp32 gate and up in y.
Status swiglu_halves(const GemmArgs& g, LaunchStream stream) {
  const int64_t n = g.w.rows / 2;
  return silu_mul(g.y, g.y_stride, g.y + n, g.y_stride, g.n_rows, n, nullptr, 0, stream, {},
                  g.swiglu);
}

}  // namespace

Status configure_gemm_kernels() { return configure_quant_mma_kernels(); }

int64_t gemm_act_half_stride(int64_t cols) { return padded_cols(cols); }

size_t gemm_act_half_bytes(int64_t n_rows, int64_t max_cols) {
  return static_cast<size_t>(n_rows) * static_cast<size_t>(padded_cols(max_cols)) * 2;
}

Status gemm(cublasHandle_t handle, const GemmArgs& g, const GemmWorkspace& ws,
            LaunchStream stream) {
  LS_CUDA_REQUIRE(handle != nullptr && g.w.quants != nullptr && g.x != nullptr);
  LS_CUDA_REQUIRE(g.y_half != nullptr ? g.y == nullptr && g.bias == nullptr && !g.accumulate
                                      : g.y != nullptr);
  const bool swiglu = g.swiglu.data != nullptr;
  LS_CUDA_REQUIRE(!swiglu || (g.y_half == nullptr && g.bias == nullptr && !g.accumulate &&
                              g.w.rows % 2 == 0 && g.swiglu.stride >= g.w.rows / 2));
  LS_CUDA_REQUIRE(g.n_rows >= 0 && g.x_stride >= g.w.cols && g.y_stride >= g.w.rows);
  if (g.n_rows == 0) return Status::ok();
  const int64_t ldx = padded_cols(g.w.cols);
  LS_CUDA_REQUIRE(ws.act_half != nullptr &&
                  ws.act_half_bytes >= gemm_act_half_bytes(g.n_rows, g.w.cols));
  const bool bf16 = g.w.type == TensorType::BF16;
  if (!g.x_half_ready) {
    LS_RETURN_IF_ERROR(convert_to_half(g.x, g.x_stride, g.n_rows, g.w.cols, ws.act_half, ldx,
                                       bf16 ? HalfType::kBF16 : HalfType::kF16, stream));
  }
  if (quant_mma_supported(g.w.type) && g.n_rows <= g.quant_mma_rows) {
    QuantMmaArgs q;
    q.w = g.w;
    q.x_half = ws.act_half;
    q.x_stride = ldx;
    q.n_rows = g.n_rows;
    q.y_stride = g.y_stride;
    q.y_half = g.y_half;
    q.bias = g.bias;
    q.accumulate = g.accumulate;
    if (swiglu && quant_mma_swiglu_supported(g.w.type)) {
      q.swiglu = g.swiglu;
      return quant_mma(q, stream);
    }
    q.y = g.y;
    LS_RETURN_IF_ERROR(quant_mma(q, stream));
    return swiglu ? swiglu_halves(g, stream) : Status::ok();
  }

  // cublasSetStream also resets the handle's workspace to cuBLAS's own pool (which may then
  // allocate, illegal during graph capture), so only switch when the stream differs.
  cudaStream_t current = nullptr;
  LS_CUBLAS_CHECK(cublasGetStream(handle, &current));
  if (current != stream) LS_CUBLAS_CHECK(cublasSetStream(handle, stream));
  const cudaDataType_t half_type = bf16 ? CUDA_R_16BF : CUDA_R_16F;
  const float beta = g.accumulate ? 1.0f : 0.0f;
  // Output column `first` of the slices below.
  const cudaDataType_t y_type = g.y_half != nullptr ? half_type : CUDA_R_32F;
  auto y_at = [&](int64_t first) -> void* {
    if (g.y_half != nullptr) return static_cast<uint8_t*>(g.y_half) + first * 2;
    return g.y + first;
  };
  if (g.w.type == TensorType::F16 || bf16) {
    LS_RETURN_IF_ERROR(gemm_slice(handle, g.w.quants, g.w.quant_row_bytes / 2, g.w.rows, g,
                                  ws.act_half, ldx, half_type, y_at(0), y_type, beta));
  } else {
    const int64_t row_bytes = ldx * 2;
    const int64_t rows_per_slice =
        std::min<int64_t>(g.w.rows, static_cast<int64_t>(ws.weight_half_bytes) / row_bytes);
    LS_CUDA_REQUIRE(ws.weight_half != nullptr && rows_per_slice >= 1);
    for (int64_t first = 0; first < g.w.rows; first += rows_per_slice) {
      const int64_t m = std::min(rows_per_slice, g.w.rows - first);
      DequantArgs d;
      d.w = g.w;
      d.first_row = first;
      d.n_rows = m;
      d.out_type = DequantOut::kF16;
      d.dst = ws.weight_half;
      d.dst_stride = ldx;
      LS_RETURN_IF_ERROR(dequantize_rows(d, stream));
      LS_RETURN_IF_ERROR(gemm_slice(handle, ws.weight_half, ldx, m, g, ws.act_half, ldx, half_type,
                                    y_at(first), y_type, beta));
    }
  }
  if (g.bias != nullptr) {
    LS_RETURN_IF_ERROR(add_bias(g.y, g.y_stride, g.bias, g.n_rows, g.w.rows, stream));
  }
  return swiglu ? swiglu_halves(g, stream) : Status::ok();
}

}  // namespace llamaserve::cuda
