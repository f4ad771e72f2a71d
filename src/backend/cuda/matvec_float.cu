// Matvec kernels for F32 F16 BF16 weights (explicit instantiations; see matvec_kernel.cuh).
#include "backend/cuda/matvec_kernel.cuh"

namespace llamaserve::cuda {

template Status launch_matvec<TensorType::F32>(const MatvecLaunch&, LaunchStream);
template Status launch_matvec<TensorType::F16>(const MatvecLaunch&, LaunchStream);
template Status launch_matvec<TensorType::BF16>(const MatvecLaunch&, LaunchStream);

}  // namespace llamaserve::cuda
