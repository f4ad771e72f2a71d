#include "backend/cuda/peer_access.h"

#include <mutex>
#include <set>
#include <utility>

#include <cuda_runtime_api.h>

#include "backend/cuda/check.h"

namespace llamaserve::cuda {

Result<bool> can_access_peer(int from, int to) {
  int can = 0;
  LS_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, from, to));
  return can != 0;
}

Status enable_peer_access(int from, int to) {
  static std::mutex mutex;
  static std::set<std::pair<int, int>> enabled;
  std::lock_guard lock(mutex);
  LS_CUDA_CHECK(cudaSetDevice(from));
  if (enabled.count({from, to}) != 0) return Status::ok();
  LS_CUDA_CHECK(cudaDeviceEnablePeerAccess(to, 0));
  enabled.insert({from, to});
  return Status::ok();
}

}  // namespace llamaserve::cuda
