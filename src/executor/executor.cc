#include "executor/executor.h"

namespace llamaserve {

Status Executor::forward_sampled(const Batch& /*batch*/, std::span<const RowSampling> /*sampling*/,
                                 std::span<int32_t> /*tokens*/, std::span<float> /*logits*/) {
  return make_error(StatusCode::kUnsupported, "{} does not sample on the device", describe());
}

Status Executor::forward_hidden(const Batch& /*batch*/, std::span<float> /*hidden*/) {
  return make_error(StatusCode::kUnsupported, "{} does not return hidden states", describe());
}

}  // namespace llamaserve
