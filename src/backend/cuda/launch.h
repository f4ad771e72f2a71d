// Whether kernel launches use programmatic dependent launch (see launch.cuh). Host-only, so
// that code compiled without nvcc can ask too.
#pragma once

namespace llamaserve::cuda {

// True unless the environment sets LLAMASERVE_CUDA_PDL=0 (read once).
bool programmatic_launch_enabled();

}  // namespace llamaserve::cuda
