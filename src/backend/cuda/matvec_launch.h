// Per-type matvec launchers, instantiated in one .cu file per type family so that host code
// calls them without nvcc. Internal to the CUDA backend; use matvec.h.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/cuda/matvec.h"

namespace llamaserve::cuda {

// PRECONDITION: args passed the checks of matvec() and args.w.type == T.
template <TensorType T>
Status launch_matvec(const MatvecArgs& args, cudaStream_t stream);

}  // namespace llamaserve::cuda
