// Matvec kernels for Q5_K weights (explicit instantiations; see matvec_kernel.cuh).
#include "backend/cuda/matvec_kernel.cuh"

namespace llamaserve::cuda {

template Status launch_matvec<TensorType::Q5_K>(const MatvecLaunch&, LaunchStream);

}  // namespace llamaserve::cuda
