// The decode attention kernel (attention_decode.cu): every tile one batch row, so that a block
// holds the G <= 8 query heads of one KV head for one row and streams that row's K/V positions.
// Internal to the CUDA backend: attention() (attention.cu) decides when it runs and checks the
// common contract.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/cuda/attention.h"
#include "core/status.h"

namespace llamaserve::cuda {

// Query heads per KV head the decode kernel is built for.
inline constexpr int kMaxDecodeGroup = 8;

// PRECONDITIONS: as attention(), plus max_tile_rows == 1 and n_head / n_head_kv <=
// kMaxDecodeGroup. Explicitly instantiated for D = 64 and 128.
template <int D>
Status launch_attention_decode(const AttentionArgs& args, LaunchStream stream);

}  // namespace llamaserve::cuda
