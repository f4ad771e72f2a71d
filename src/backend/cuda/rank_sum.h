// How the CUDA backend's partial results are summed over tensor-parallel ranks: the strategy
// (RankSum) it calls at the two points of a layer where a sum is due, and what it hands it.
//
// Under tensor parallelism each rank holds a shard of the weights, so each block's output
// projection (attention output, FFN down) yields a partial that must end up added, summed over
// the ranks, to the residual stream act.hidden before the next use of act.hidden: the next
// block's RMSNorm, or the end of the pass's layer range. The backend calls
//   1. RankSum::project for the output projection, which runs it in the form its sum needs
//      (into act.hidden, as an fp32 or half partial into a buffer, as a fused reduction's
//      partial) and sums it now, or leaves the sum pending (PendingSum);
//   2. RankSum::consume for the RMSNorm that follows, which sets up the norm to add what is
//      pending, or RankSum::finish at the end of the range, which adds it.
// OneRankSum is one GPU; parallel/rank_sum.h has the multi-GPU ways (TpSumMode), one class
// each. A strategy is const and shared by the passes: what a pass has left pending is the
// pass's own PendingSum, passed to every call.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "backend/cuda/launch.h"
#include "core/status.h"

namespace llamaserve::cuda {

struct CudaLayerWeights;
struct DeviceMatrix;
class OpTimer;
struct PeerReduceView;
struct RmsNormArgs;

// The elements of a tensor-parallel sum.
enum class SumType { kF32, kF16, kBF16 };

// Bytes of one element of `type`.
constexpr int64_t sum_type_bytes(SumType type) { return type == SumType::kF32 ? 4 : 2; }

// What act.hidden still lacks after a block's output projection, and how many pulled sums the
// pass has made (their slots alternate). One per pass, starting empty.
struct PendingSum {
  enum class Kind {
    kNone,
    kFused,   // the ranks' partials of a fused reduction (peer_all_reduce.h)
    kPulled,  // the ranks' partials of a pulled sum, in `slot` (peer_all_reduce.h)
    kF16,     // the sum of the ranks' partials, as halves in SumRows::half
    kBF16,    // the same in bf16
  };
  Kind kind = Kind::kNone;
  int32_t slot = 0;
  int32_t pulled = 0;
  // The partials are still in the ranks' own memory: their consumer waits for the peers.
  bool with_peers() const { return kind == Kind::kFused || kind == Kind::kPulled; }
};

// The rows of a pass that sums go to, and the backend's stream and op timer.
struct SumRows {
  float* hidden = nullptr;  // act.hidden: the residual stream
  void* half = nullptr;     // act.sum_half: a sum of half partials (null unless allocated)
  int64_t stride = 0;       // act.embd_stride, of both
  int64_t n_rows = 0;       // the pass's rows
  int64_t n = 0;            // n_embd
  LaunchStream stream{nullptr};
  OpTimer* op_timer = nullptr;  // when set, an event after each operation (op_timer.h)

  // Closes the interval of `label` when op timing is on.
  Status timed(const char* label) const;
};

// A block's output projection, y = w x over the pass's rows, whose sum over the ranks must end
// up added to act.hidden. The backend describes it and runs it in whichever form the strategy
// asks for.
class OutputProjection {
 public:
  // The product's weights: layer().wo or layer().w_down.
  virtual const DeviceMatrix& weights() const = 0;
  virtual const CudaLayerWeights& layer() const = 0;
  // Whether a product of the pass's rows with `w` runs as a GEMM (else as matvecs).
  virtual bool uses_gemm(const DeviceMatrix& w) const = 0;
  // act.hidden (+)= w x: added to act.hidden when `accumulate`, else written over it. With
  // `reduce`, a matvec that writes its rows as this rank's partial of that fused reduction
  // instead (MatvecArgs::reduce).
  virtual Status into_hidden(bool accumulate, const PeerReduceView* reduce) const = 0;
  // The GEMM w x alone, as fp32 rows at y or, with y null, as halves of w's GEMM type (bf16 for
  // BF16 weights, else f16) at y_half; rows SumRows::stride apart.
  virtual Status gemm_partial(float* y, void* y_half) const = 0;
  // Closes the product's interval of the op timer ("o-proj", "down").
  virtual Status timed() const = 0;

 protected:
  ~OutputProjection() = default;
};

// How one rank sums its partials over the ranks; one per rank, shared by its passes.
class RankSum {
 public:
  virtual ~RankSum() = default;

  // Whether this rank adds the residual stream to its partial, so that the sum over the ranks
  // holds it once; the primary rank also computes the logits.
  bool primary() const { return primary_; }
  // Whether GEMM output projections may sum their partials as halves in act.sum_half
  // (CudaLimits::half_sums: the executor allocates it).
  bool half_sums() const { return half_sums_; }

  // Runs `out` and sees that its sum over the ranks ends up in act.hidden: at once, or left in
  // *pending for the next consume() or finish(). Without `pending` (executors that run the
  // blocks of several row ranges themselves), the product is added to act.hidden as the sum
  // over the ranks wants it, and the caller sums act.hidden after it (sum_hidden).
  // PRECONDITION: nothing is pending.
  virtual Status project(const OutputProjection& out, PendingSum* pending,
                         const SumRows& rows) const = 0;
  // Before the RMSNorm `norm` of act.hidden's rows: sets it up to add what `pending` says
  // act.hidden lacks first, and clears `pending`; meets the ranks when the norm will wait for
  // them.
  virtual Status consume(PendingSum& pending, const SumRows& rows, RmsNormArgs& norm) const = 0;
  // At the end of the pass's layer range: adds what `pending` says act.hidden lacks.
  virtual Status finish(const PendingSum& pending, const SumRows& rows) const = 0;

  // n_rows rows of fp32 at `hidden`, `stride` floats apart, summed over the ranks in place on
  // `stream`: the sum after a block run without a PendingSum.
  virtual Status sum_hidden(float* hidden, int64_t n_rows, int64_t stride,
                            cudaStream_t stream) const = 0;
  // After queuing a captured pass (a CUDA graph) with kernels that wait for the other ranks:
  // where the ranks of one process meet, as the calls above do before queuing such a kernel
  // outside capture (parallel/rank_barrier.h says why).
  virtual Status meet() const = 0;

 protected:
  RankSum(bool primary, bool half_sums) : primary_(primary), half_sums_(half_sums) {}

 private:
  bool primary_;
  bool half_sums_;
};

// One GPU: every product is added to act.hidden, and nothing is ever pending.
class OneRankSum final : public RankSum {
 public:
  OneRankSum() : RankSum(/*primary=*/true, /*half_sums=*/false) {}

  Status project(const OutputProjection& out, PendingSum* pending,
                 const SumRows& rows) const override;
  Status consume(PendingSum& pending, const SumRows& rows, RmsNormArgs& norm) const override;
  Status finish(const PendingSum& pending, const SumRows& rows) const override;
  Status sum_hidden(float* hidden, int64_t n_rows, int64_t stride,
                    cudaStream_t stream) const override;
  Status meet() const override;
};

}  // namespace llamaserve::cuda
