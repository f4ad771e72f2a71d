// Matvec kernels for Q4_0 Q4_1 weights (explicit instantiations; see matvec_kernel.cuh).
#include "backend/cuda/matvec_kernel.cuh"

namespace llamaserve::cuda {

template Status launch_matvec<TensorType::Q4_0>(const MatvecLaunch&, LaunchStream);
template Status launch_matvec<TensorType::Q4_1>(const MatvecLaunch&, LaunchStream);

}  // namespace llamaserve::cuda
