#include "backend/cuda/rank_sum.h"

#include "backend/cuda/op_timer.h"

namespace llamaserve::cuda {

Status SumRows::timed(const char* label) const {
  return op_timer != nullptr ? op_timer->mark(label, stream) : Status::ok();
}

Status OneRankSum::project(const OutputProjection& out, PendingSum* /*pending*/,
                           const SumRows& /*rows*/) const {
  LS_RETURN_IF_ERROR(out.into_hidden(/*accumulate=*/true, /*reduce=*/nullptr));
  return out.timed();
}

Status OneRankSum::consume(PendingSum& /*pending*/, const SumRows& /*rows*/,
                           RmsNormArgs& /*norm*/) const {
  return Status::ok();
}

Status OneRankSum::finish(const PendingSum& /*pending*/, const SumRows& /*rows*/) const {
  return Status::ok();
}

Status OneRankSum::sum_hidden(float* /*hidden*/, int64_t /*n_rows*/, int64_t /*stride*/,
                              cudaStream_t /*stream*/) const {
  return Status::ok();
}

Status OneRankSum::meet() const { return Status::ok(); }

}  // namespace llamaserve::cuda
