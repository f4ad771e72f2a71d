// How tensor-parallel ranks sum their partial results: part of the configuration of a layout
// (service/config.h), carried by ExecutorOptions to the multi-GPU executors. Plain data.
#pragma once

#include <string_view>

#include "core/status.h"

namespace llamaserve {

enum class TpSumMode {
  kFused,  // decode passes (matvec products) through fused peer-to-peer reductions, the rest NCCL
  kPeer,   // tensors of up to the peer group's capacity through the one-kernel peer all-reduce
  kNccl,   // NCCL only
};

struct TpSums {
  TpSumMode mode = TpSumMode::kFused;
  // The partials of the GEMM output projections are summed as halves (f16, or bf16 for BF16
  // weights); false sums them as fp32.
  bool half_gemm_sums = true;
};

// "fused", "peer" or "nccl".
Result<TpSumMode> parse_tp_sum_mode(std::string_view text);
const char* tp_sum_mode_name(TpSumMode mode);

}  // namespace llamaserve
