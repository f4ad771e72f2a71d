#include "backend/cuda/launch.h"

#include <atomic>

#include <cuda_runtime_api.h>

namespace llamaserve::cuda {

int current_device_sm_count() {
  constexpr int kDevices = 64;
  constexpr int kFallback = 132;
  static std::atomic<int> counts[kDevices];
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kDevices) return kFallback;
  int count = counts[device].load(std::memory_order_relaxed);
  if (count == 0) {
    if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      return kFallback;
    }
    counts[device].store(count, std::memory_order_relaxed);
  }
  return count;
}

}  // namespace llamaserve::cuda
