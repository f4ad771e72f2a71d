// Matvec kernels for Q4_K weights (explicit instantiations; see matvec_kernel.cuh).
#include "backend/cuda/matvec_kernel.cuh"

namespace llamaserve::cuda {

template Status launch_matvec<TensorType::Q4_K>(const MatvecLaunch&, LaunchStream);

}  // namespace llamaserve::cuda
