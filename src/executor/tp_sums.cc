#include "executor/tp_sums.h"

namespace llamaserve {

Result<TpSumMode> parse_tp_sum_mode(std::string_view text) {
  if (text == "fused") return TpSumMode::kFused;
  if (text == "peer") return TpSumMode::kPeer;
  if (text == "nccl") return TpSumMode::kNccl;
  return make_error(StatusCode::kInvalidArgument,
                    "tensor-parallel sums '{}': expected fused, peer or nccl", text);
}

const char* tp_sum_mode_name(TpSumMode mode) {
  switch (mode) {
    case TpSumMode::kFused: return "fused";
    case TpSumMode::kPeer: return "peer";
    case TpSumMode::kNccl: return "nccl";
  }
  return "?";
}

}  // namespace llamaserve
