// The capture range of a device profiler: Nsight Compute started with
// --profile-from-start off profiles only the kernels launched between profiler_start() and
// profiler_stop() (cudaProfilerStart/Stop), so that a benchmark can hand it exactly the steps
// to break down. No-ops in builds without CUDA.
#pragma once

#include "core/status.h"

namespace llamaserve {

Status profiler_start();
Status profiler_stop();

}  // namespace llamaserve
