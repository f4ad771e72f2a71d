#include "parallel/rank_barrier.h"

#include <thread>

namespace llamaserve {
namespace {

Status aborted_error() {
  return make_error(StatusCode::kCancelled, "rank barrier aborted: another rank failed");
}

}  // namespace

RankBarrier::RankBarrier(int n_ranks, std::chrono::milliseconds limit)
    : n_ranks_(n_ranks), limit_(limit), passed_(static_cast<size_t>(n_ranks), 0) {}

Status RankBarrier::arrive(int rank) {
  if (rank < 0 || rank >= n_ranks_) {
    return make_error(StatusCode::kInvalidArgument, "rank barrier: rank {} of {}", rank, n_ranks_);
  }
  if (aborted()) return aborted_error();
  // The k-th arrival of every rank (k from 1) is in once the count reaches k * n_ranks: no rank
  // can arrive a (k + 1)-th time before all have arrived a k-th time.
  const uint64_t k = ++passed_[static_cast<size_t>(rank)];
  const uint64_t target = k * static_cast<uint64_t>(n_ranks_);
  arrivals_.fetch_add(1, std::memory_order_acq_rel);
  // The peers are usually a few microseconds away (they queue the same kernels): spin first,
  // then give the core away.
  const auto start = std::chrono::steady_clock::now();
  for (uint32_t spins = 0; arrivals_.load(std::memory_order_acquire) < target; ++spins) {
    if (aborted()) return aborted_error();
    if (spins < 2048) continue;
    std::this_thread::yield();
    if ((spins & 255u) == 0 && std::chrono::steady_clock::now() - start > limit_) {
      abort();
      return make_error(StatusCode::kInternal,
                        "rank barrier: rank {} waited {} ms at its arrival {} for the other ranks",
                        rank, limit_.count(), k);
    }
  }
  return Status::ok();
}

void RankBarrier::abort() { aborted_.store(true, std::memory_order_release); }

}  // namespace llamaserve
