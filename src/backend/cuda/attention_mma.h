// The tensor-core attention kernel for prefill tiles (attention_mma.cu). Internal to the CUDA
// backend: attention() (attention.cu) decides when it runs and checks the common contract.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/cuda/attention.h"
#include "core/status.h"

namespace llamaserve::cuda {

// PRECONDITIONS: as attention(), plus n_splits == 1, out_q.qs == nullptr and a head_dim of D.
// Explicitly instantiated for D = 64 and 128.
template <int D>
Status launch_attention_mma(const AttentionArgs& args, LaunchStream stream);

// Raises the kernels' shared-memory limit (above 48 KB for head_dim 128); called by
// configure_attention_kernels().
Status configure_attention_mma_kernels();

}  // namespace llamaserve::cuda
