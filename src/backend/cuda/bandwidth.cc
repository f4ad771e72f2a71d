#include "backend/cuda/bandwidth.h"

#include <algorithm>
#include <vector>

#include <cuda_runtime_api.h>

#include "backend/cuda/check.h"

namespace llamaserve::cuda {
namespace {

// Frees the buffers and events on every return path.
struct CopyResources {
  void* a = nullptr;
  void* b = nullptr;
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  cudaStream_t stream = nullptr;
  ~CopyResources() {
    if (a != nullptr) LS_CUDA_LOG_ERROR(cudaFree(a));
    if (b != nullptr) LS_CUDA_LOG_ERROR(cudaFree(b));
    if (start != nullptr) LS_CUDA_LOG_ERROR(cudaEventDestroy(start));
    if (stop != nullptr) LS_CUDA_LOG_ERROR(cudaEventDestroy(stop));
    if (stream != nullptr) LS_CUDA_LOG_ERROR(cudaStreamDestroy(stream));
  }
};

}  // namespace

Result<double> measure_copy_bandwidth(int device, uint64_t bytes, int reps) {
  if (bytes == 0 || reps < 1) {
    return make_error(StatusCode::kInvalidArgument, "measure_copy_bandwidth: bytes and reps > 0");
  }
  LS_CUDA_CHECK(cudaSetDevice(device));
  CopyResources r;
  LS_CUDA_CHECK(cudaMalloc(&r.a, bytes));
  LS_CUDA_CHECK(cudaMalloc(&r.b, bytes));
  LS_CUDA_CHECK(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking));
  LS_CUDA_CHECK(cudaEventCreate(&r.start));
  LS_CUDA_CHECK(cudaEventCreate(&r.stop));
  LS_CUDA_CHECK(cudaMemsetAsync(r.a, 1, bytes, r.stream));
  LS_CUDA_CHECK(cudaMemcpyAsync(r.b, r.a, bytes, cudaMemcpyDeviceToDevice, r.stream));  // warm-up
  std::vector<double> seconds;
  for (int i = 0; i < reps; ++i) {
    LS_CUDA_CHECK(cudaEventRecord(r.start, r.stream));
    LS_CUDA_CHECK(cudaMemcpyAsync(r.b, r.a, bytes, cudaMemcpyDeviceToDevice, r.stream));
    LS_CUDA_CHECK(cudaEventRecord(r.stop, r.stream));
    LS_CUDA_CHECK(cudaEventSynchronize(r.stop));
    float ms = 0.0f;
    LS_CUDA_CHECK(cudaEventElapsedTime(&ms, r.start, r.stop));
    seconds.push_back(ms * 1e-3);
  }
  std::sort(seconds.begin(), seconds.end());
  return 2.0 * static_cast<double>(bytes) / seconds[seconds.size() / 2];
}

}  // namespace llamaserve::cuda
