// Whether kernel launches use programmatic dependent launch (see launch.cuh), and the current
// device's SM count for sizing grids. Host-only, so that code compiled without nvcc can ask too.
#pragma once

namespace llamaserve::cuda {

// True unless the environment sets LLAMASERVE_CUDA_PDL=0 (read once).
bool programmatic_launch_enabled();

// The current device's SM count, asked of the runtime once per device (132 if it cannot say).
int current_device_sm_count();

}  // namespace llamaserve::cuda
