#include "backend/cuda/launch.h"

#include <cstdlib>
#include <cstring>

namespace llamaserve::cuda {

bool programmatic_launch_enabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("LLAMASERVE_CUDA_PDL");
    return value == nullptr || std::strcmp(value, "0") != 0;
  }();
  return enabled;
}

}  // namespace llamaserve::cuda
