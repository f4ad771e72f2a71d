#include "executor/profiler_range.h"

#if LLAMASERVE_HAS_CUDA
#include <cuda_profiler_api.h>

#include "backend/cuda/check.h"
#endif

namespace llamaserve {

#if LLAMASERVE_HAS_CUDA
Status profiler_start() {
  LS_CUDA_CHECK(cudaProfilerStart());
  return Status::ok();
}
Status profiler_stop() {
  LS_CUDA_CHECK(cudaProfilerStop());
  return Status::ok();
}
#else
Status profiler_start() { return Status::ok(); }
Status profiler_stop() { return Status::ok(); }
#endif

}  // namespace llamaserve
