#include "parallel/rank_sum.h"

#include <cstddef>
#include <cstdint>
#include <utility>

#include <cuda_runtime_api.h>

#include "backend/cuda/check.h"
#include "backend/cuda/cuda_weights.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/matvec.h"
#include "backend/cuda/norm.h"
#include "parallel/tp_rank.h"

namespace llamaserve {
namespace {

using cuda::OutputProjection;
using cuda::PendingSum;
using cuda::RmsNormArgs;
using cuda::SumRows;
using cuda::SumType;

// Each output projection's sum by an all-reduce: of the residual rows, or of half partials that
// the next RMSNorm (or add_half at the end of the layer range) adds to the residual.
class NcclRankSum : public cuda::RankSum {
 public:
  explicit NcclRankSum(RankSumSetup setup)
      : RankSum(/*primary=*/setup.rank == 0, setup.half_gemm_sums), setup_(std::move(setup)) {}

  Status project(const OutputProjection& out, PendingSum* pending,
                 const SumRows& rows) const override {
    if (pending != nullptr && sums_in_half(out, rows)) {
      // Every rank writes its partial alone; the next RMSNorm adds the sum to the residual.
      LS_RETURN_IF_ERROR(out.gemm_partial(nullptr, rows.half));
      pending->kind =
          out.weights().type == TensorType::BF16 ? PendingSum::Kind::kBF16 : PendingSum::Kind::kF16;
    } else {
      // Only the primary rank adds the residual: the sum over the ranks has it once.
      LS_RETURN_IF_ERROR(out.into_hidden(/*accumulate=*/primary(), /*reduce=*/nullptr));
    }
    LS_RETURN_IF_ERROR(out.timed());
    return pending != nullptr ? sum(*pending, rows) : Status::ok();
  }

  Status consume(PendingSum& pending, const SumRows& rows, RmsNormArgs& norm) const override {
    if (pending.kind != PendingSum::Kind::kNone) {
      norm.half_residual = rows.half;
      norm.half_residual_bf16 = pending.kind == PendingSum::Kind::kBF16;
      norm.residual_stride = rows.stride;
    }
    pending.kind = PendingSum::Kind::kNone;
    return Status::ok();
  }

  Status finish(const PendingSum& pending, const SumRows& rows) const override {
    if (pending.kind == PendingSum::Kind::kNone) return Status::ok();
    LS_RETURN_IF_ERROR(cuda::add_half(
        rows.hidden, rows.stride, rows.half, rows.stride,
        pending.kind == PendingSum::Kind::kBF16 ? cuda::HalfType::kBF16 : cuda::HalfType::kF16,
        rows.n_rows, rows.n, rows.stream));
    return rows.timed("residual");
  }

  Status sum_hidden(float* hidden, int64_t n_rows, int64_t stride,
                    cudaStream_t stream) const override {
    LS_RETURN_IF_ERROR(meet_ranks(stream));
    return all_reduce(hidden, static_cast<size_t>(n_rows * stride), SumType::kF32, stream);
  }

  Status meet() const override {
    return setup_.barrier != nullptr ? setup_.barrier->arrive(setup_.rank) : Status::ok();
  }

 protected:
  const RankSumSetup& setup() const { return setup_; }

  // Sums `count` elements of `type` at `data` over the ranks, in place, on `stream`; every rank
  // calls it in the same order.
  virtual Status all_reduce(void* data, size_t count, SumType type, cudaStream_t stream) const {
    return nccl_all_reduce_sum(*setup_.comm, data, count, type, stream);
  }

  // Before queuing a kernel that waits for the other ranks: the barrier, unless `stream` is
  // being captured (the graph's launch meets the ranks instead: meet()).
  Status meet_ranks(cudaStream_t stream) const {
    if (setup_.barrier == nullptr) return Status::ok();
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    LS_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    return capture == cudaStreamCaptureStatusNone ? setup_.barrier->arrive(setup_.rank)
                                                  : Status::ok();
  }

 private:
  // Whether the output projection sums its partials as halves in rows.half.
  bool sums_in_half(const OutputProjection& out, const SumRows& rows) const {
    return half_sums() && rows.half != nullptr && out.uses_gemm(out.weights());
  }

  // After an output projection: all-reduces rows.hidden (nothing pending) or rows.half (half
  // partials).
  Status sum(const PendingSum& pending, const SumRows& rows) const {
    const size_t count = static_cast<size_t>(rows.n_rows * rows.stride);
    LS_RETURN_IF_ERROR(meet_ranks(rows.stream));
    if (pending.kind == PendingSum::Kind::kNone) {
      LS_RETURN_IF_ERROR(all_reduce(rows.hidden, count, SumType::kF32, rows.stream));
    } else {
      const SumType type = pending.kind == PendingSum::Kind::kBF16 ? SumType::kBF16 : SumType::kF16;
      LS_RETURN_IF_ERROR(all_reduce(rows.half, count, type, rows.stream));
    }
    return rows.timed("all-reduce");
  }

  RankSumSetup setup_;
};

// NcclRankSum with small fp32 sums (decode rows) through the one-kernel peer all-reduce.
class PeerCopyRankSum final : public NcclRankSum {
 public:
  // PRECONDITION: setup.peer is set.
  explicit PeerCopyRankSum(RankSumSetup setup) : NcclRankSum(std::move(setup)) {}

 protected:
  Status all_reduce(void* data, size_t count, SumType type, cudaStream_t stream) const override {
    const cuda::PeerAllReduce& peer = *setup().peer;
    if (type == SumType::kF32 && count <= peer.capacity()) {
      return peer.run(setup().rank, static_cast<float*>(data), count, stream);
    }
    return NcclRankSum::all_reduce(data, count, type, stream);
  }
};

// Matvec output projections as fused reductions, GEMM ones as pulled sums (peer_all_reduce.h),
// each completed by the next RMSNorm or, at the end of the layer range, by peer_reduce_add or
// peer_pull_add; what neither fits as NcclRankSum.
class FusedRankSum final : public NcclRankSum {
 public:
  // PRECONDITION: setup.peer is set. Every rank of the group has one, or none.
  explicit FusedRankSum(RankSumSetup setup)
      : NcclRankSum(std::move(setup)), view_(this->setup().peer->view(this->setup().rank)) {}

  Status project(const OutputProjection& out, PendingSum* pending,
                 const SumRows& rows) const override {
    if (pending != nullptr && pulls_sums(out, rows)) {
      // The partial into this rank's own slot, then every peer told that it is complete.
      const int32_t slot = pending->pulled % 2;
      const bool fp32 = view_.pull_type == SumType::kF32;
      LS_RETURN_IF_ERROR(
          out.gemm_partial(fp32 ? static_cast<float*>(view_.pull_slot(slot)) : nullptr,
                           fp32 ? nullptr : view_.pull_slot(slot)));
      LS_RETURN_IF_ERROR(cuda::peer_pull_signal(view_, rows.stream));
      pending->kind = PendingSum::Kind::kPulled;
      pending->slot = slot;
      ++pending->pulled;
      return out.timed();
    }
    if (pending != nullptr && fuses_reduction(out, rows)) {
      LS_RETURN_IF_ERROR(out.into_hidden(/*accumulate=*/false, &view_));
      pending->kind = PendingSum::Kind::kFused;
      return out.timed();
    }
    return NcclRankSum::project(out, pending, rows);
  }

  Status consume(PendingSum& pending, const SumRows& rows, RmsNormArgs& norm) const override {
    if (!pending.with_peers()) return NcclRankSum::consume(pending, rows, norm);
    norm.reduce = view_;
    if (pending.kind == PendingSum::Kind::kPulled) {
      norm.pull_slot = pending.slot;
      norm.residual_stride = rows.stride;
    }
    pending.kind = PendingSum::Kind::kNone;
    // The norm waits for the peers' partials.
    return meet_ranks(rows.stream);
  }

  Status finish(const PendingSum& pending, const SumRows& rows) const override {
    if (!pending.with_peers()) return NcclRankSum::finish(pending, rows);
    LS_RETURN_IF_ERROR(meet_ranks(rows.stream));
    if (pending.kind == PendingSum::Kind::kFused) {
      LS_RETURN_IF_ERROR(
          cuda::peer_reduce_add(view_, rows.hidden, rows.stride, rows.n_rows, rows.n, rows.stream));
    } else {
      LS_RETURN_IF_ERROR(cuda::peer_pull_add(view_, pending.slot, rows.stride, rows.hidden,
                                             rows.stride, rows.n_rows, rows.n, rows.stream));
    }
    return rows.timed("all-reduce");
  }

 private:
  // Whether the output projection sums over the ranks by a fused reduction.
  bool fuses_reduction(const OutputProjection& out, const SumRows& rows) const {
    return view_.active() && !out.uses_gemm(out.weights()) && rows.n_rows <= cuda::kMaxMatvecRows &&
           rows.n_rows * out.weights().rows <= view_.capacity;
  }

  // Whether both output projections of its layer sum by pulled sums: both GEMMs whose partials'
  // type is the peer group's, the rows within its slots (a pass's pulled sums then come in
  // pairs, as their two slots need).
  bool pulls_sums(const OutputProjection& out, const SumRows& rows) const {
    auto pulls = [&](const cuda::DeviceMatrix& m) {
      const SumType type = !half_sums()                 ? SumType::kF32
                           : m.type == TensorType::BF16 ? SumType::kBF16
                                                        : SumType::kF16;
      return out.uses_gemm(m) && type == view_.pull_type;
    };
    return view_.pull_fits(rows.n_rows, rows.stride) && pulls(out.layer().wo) &&
           pulls(out.layer().w_down);
  }

  cuda::PeerReduceView view_;  // this rank's handles of the group's reductions
};

}  // namespace

std::shared_ptr<const cuda::RankSum> make_rank_sum(TpSumMode mode, const RankSumSetup& setup) {
  if (setup.peer != nullptr && mode == TpSumMode::kFused) {
    return std::make_shared<const FusedRankSum>(setup);
  }
  if (setup.peer != nullptr && mode == TpSumMode::kPeer) {
    return std::make_shared<const PeerCopyRankSum>(setup);
  }
  return std::make_shared<const NcclRankSum>(setup);
}

}  // namespace llamaserve
