// The host-side meeting point of the tensor-parallel ranks of one process, before any of them
// queues a kernel that waits for the others (an RMSNorm or add that sums the peers' partials,
// an NCCL or peer all-reduce, a decode graph holding such kernels).
//
// Why: CUDA loads a kernel lazily, at its first launch on a device, and a load may wait until
// that device's running kernels finish, under a lock the loading threads of the process share.
// A rank whose device runs a kernel waiting for a peer's partial, and whose thread then loads
// a kernel, holds that lock until the peer's partial arrives; if the peer's thread needs the
// lock to launch the kernel that computes the partial, neither moves (the wait traps after
// about 10 s; peer_reduce.cuh). With every rank arriving here before it queues a waiting
// kernel, a rank's waiting kernel only ever runs once every peer has queued everything up to
// its own waiting kernel, the partials included: nothing on a device then waits for a host
// thread, and a load's wait ends. Ranks in separate processes do not share the lock and need
// no barrier.
//
// Every rank must arrive the same number of times, in the same order of passes; a rank that
// fails leaves the others to abort().
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

#include "core/status.h"

namespace llamaserve {

class RankBarrier {
 public:
  // A barrier of n_ranks ranks (numbered 0 to n_ranks - 1). PRECONDITION: n_ranks >= 1.
  explicit RankBarrier(int n_ranks, std::chrono::milliseconds limit = std::chrono::seconds(30));
  RankBarrier(const RankBarrier&) = delete;
  RankBarrier& operator=(const RankBarrier&) = delete;

  // Rank `rank`'s next arrival: returns once every rank has arrived as often, kCancelled once
  // abort() was called, kInternal when the others did not come within the limit (the
  // barrier is then aborted too: the ranks no longer agree on where they are).
  // PRECONDITION: at most one thread per rank calls it at a time.
  Status arrive(int rank);

  // Makes every wait, now or later, return kCancelled.
  void abort();
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }

 private:
  const int n_ranks_;
  const std::chrono::milliseconds limit_;
  std::atomic<uint64_t> arrivals_{0};  // over all ranks, ever
  std::atomic<bool> aborted_{false};
  std::vector<uint64_t> passed_;  // per rank: its arrivals so far (each rank's own entry)
};

}  // namespace llamaserve
