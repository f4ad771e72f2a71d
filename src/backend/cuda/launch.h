// The stream a kernel launcher queues on, with whether its launches use programmatic dependent
// launch (see launch.cuh), and the current device's SM count for sizing grids. Host-only, so
// that code compiled without nvcc can use them too.
#pragma once

#include <cuda_runtime_api.h>

namespace llamaserve::cuda {

// Every launcher takes one. The backend passes its options' KernelTuning::pdl; a bare stream
// (as the kernel tests and benchmarks pass) converts to one with PDL allowed. Launches on the
// legacy default stream are plain either way (launch_kernel).
struct LaunchStream {
  // NOLINTNEXTLINE(google-explicit-constructor): a bare stream is a LaunchStream.
  LaunchStream(cudaStream_t s, bool with_pdl = true) : stream(s), pdl(with_pdl) {}
  // NOLINTNEXTLINE(google-explicit-constructor): for the runtime API and cuBLAS calls.
  operator cudaStream_t() const { return stream; }

  cudaStream_t stream;
  bool pdl;  // kernels launched through launch_kernel() may use PDL
};

// The current device's SM count, asked of the runtime once per device (132 if it cannot say).
int current_device_sm_count();

}  // namespace llamaserve::cuda
