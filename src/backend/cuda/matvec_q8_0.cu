// Matvec kernels for Q8_0 weights (explicit instantiations; see matvec_kernel.cuh).
#include "backend/cuda/matvec_kernel.cuh"

namespace llamaserve::cuda {

template Status launch_matvec<TensorType::Q8_0>(const MatvecLaunch&, LaunchStream);

}  // namespace llamaserve::cuda
