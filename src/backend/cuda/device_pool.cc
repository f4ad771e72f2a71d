#include "backend/cuda/device_pool.h"

#include <cuda_runtime_api.h>

#include <atomic>

#include "backend/cuda/check.h"
#include "backend/cuda/device_matrix.h"

namespace llamaserve::cuda {
namespace {

std::atomic<uint64_t> g_live_bytes{0};
std::atomic<int64_t> g_live_pools{0};

}  // namespace

uint64_t DevicePool::live_bytes() { return g_live_bytes.load(); }
int64_t DevicePool::live_pools() { return g_live_pools.load(); }

Result<std::unique_ptr<DevicePool>> DevicePool::create(int device, uint64_t bytes) {
  LS_CUDA_CHECK(cudaSetDevice(device));
  void* base = nullptr;
  const cudaError_t error = cudaMalloc(&base, bytes);
  if (error != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free allocation error
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    return make_error(
        StatusCode::kResourceExhausted,
        "cuda:{}: cannot allocate the {:.2f} GiB device pool ({}); {:.2f} GiB free of "
        "{:.2f} GiB",
        device, bytes / 1073741824.0, cudaGetErrorString(error), free_bytes / 1073741824.0,
        total_bytes / 1073741824.0);
  }
  g_live_bytes += bytes;
  ++g_live_pools;
  return std::unique_ptr<DevicePool>(new DevicePool(device, static_cast<uint8_t*>(base), bytes));
}

DevicePool::~DevicePool() {
  if (base_ == nullptr) return;
  LS_CUDA_LOG_ERROR(cudaFree(base_));
  g_live_bytes -= capacity_;
  --g_live_pools;
}

Result<void*> DevicePool::allocate(uint64_t bytes, std::string_view what) {
  const uint64_t start = align_up(used_, kDeviceAlignment);
  if (start + bytes > capacity_) {
    return make_error(StatusCode::kInternal,
                      "device pool of {} bytes cannot hold {} ({} bytes; {} used): the memory plan "
                      "undercounted",
                      capacity_, what, bytes, used_);
  }
  used_ = start + bytes;
  return static_cast<void*>(base_ + start);
}

}  // namespace llamaserve::cuda
