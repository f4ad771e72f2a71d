#include "backend/cuda/matvec.h"

#include "backend/cuda/check.h"
#include "backend/cuda/matvec_launch.h"

namespace llamaserve::cuda {

uint64_t matvec_weight_bytes(const DeviceMatrix& w) {
  return static_cast<uint64_t>(w.rows) *
         static_cast<uint64_t>(w.quant_row_bytes + w.scale_row_bytes);
}

Status matvec(const MatvecArgs& a, cudaStream_t stream) {
  LS_CUDA_REQUIRE(a.w.quants != nullptr && a.w.rows > 0 && a.w.cols > 0);
  LS_CUDA_REQUIRE(a.x != nullptr && a.y != nullptr && a.n_rows >= 1);
  LS_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && a.x_stride % 4 == 0);
  LS_CUDA_REQUIRE(a.n_rows == 1 || (a.x_stride >= a.w.cols && a.y_stride >= a.w.rows));
  switch (a.w.type) {
    case TensorType::F32: return launch_matvec<TensorType::F32>(a, stream);
    case TensorType::F16: return launch_matvec<TensorType::F16>(a, stream);
    case TensorType::BF16: return launch_matvec<TensorType::BF16>(a, stream);
    case TensorType::Q8_0: return launch_matvec<TensorType::Q8_0>(a, stream);
    case TensorType::Q4_0: return launch_matvec<TensorType::Q4_0>(a, stream);
    case TensorType::Q4_1: return launch_matvec<TensorType::Q4_1>(a, stream);
    case TensorType::Q4_K: return launch_matvec<TensorType::Q4_K>(a, stream);
    case TensorType::Q5_K: return launch_matvec<TensorType::Q5_K>(a, stream);
    case TensorType::Q6_K: return launch_matvec<TensorType::Q6_K>(a, stream);
    default: return unsupported_weight_type(a.w.type, "matvec");
  }
}

}  // namespace llamaserve::cuda
