// Sums small tensors over the tensor-parallel ranks of one host through peer-to-peer stores
// (NVLink), for decode steps where an all-reduce's latency, not its bandwidth, is the cost.
//
// The protocol (peer_reduce.cuh has the device side). Every rank holds on its device an inbox
// of two slots, each with room for every rank's partial (capacity words each), and two counters
// of its own: the epoch (reductions completed on this rank) and the arrivals (blocks of the
// running consumer that are done). A word is a value and the epoch that wrote it, stored in one
// 8-byte store. A reduction has a producer and a consumer, two kernels or one:
//   - the producer writes its partial into slot e % 2, row `rank`, of every rank's inbox, where
//     e = epoch + 1, each value tagged with e; it needs no fence, flag or barrier;
//   - the consumer waits for each word of slot e % 2 to carry e and sums the rows in rank order,
//     so that every rank gets bit-identical sums; its last block raises the epoch to e.
// Two slots suffice: a rank cannot write reduction e + 2 before every peer has consumed e (its
// producer of e + 2 follows its consumer of e + 1 in stream order, which waited for this rank's
// words of e + 1, written after this rank's consumer of e).
//
// Two uses: run() is a whole all-reduce in one kernel (one block); view() gives the handles for
// a fused reduction, where the matvec that computes the partial is the producer (no separate
// kernel) and the RMSNorm that reads the sum is the consumer (matvec.h, norm.h). Either way,
// every rank must make the same sequence of reductions, each rank on its own stream, the ranks
// on distinct devices with peer access between every pair.
//
// Pulled sums, for passes whose output projections are GEMMs (prompts, larger batches): too
// large to push tagged words, so each rank's GEMM writes its partial into its own memory (one of
// two slots: the pass's pulled sums alternate them, two per layer) and peer_pull_signal() tells
// every peer it is complete (its pulled-sum epoch, a release store at system scope); the
// consumer (an RMSNorm, or peer_pull_add at the end of a layer range) waits for every peer's
// signal of that epoch and reads all partials, the peers' over NVLink, summing them in rank
// order. No all-reduce kernel, and each partial crosses NVLink once per reader. Two slots
// suffice for the same reason as above; every pass must make an even number of pulled sums.
//
// A rank that waits for a peer checks the group's abort flag (host memory): abort() lets every
// waiting kernel return (with wrong sums; the caller then discards the pass and the group).
// Without it a wait gives up after about 10 s and traps (the device context is lost).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <cuda_runtime_api.h>

#include "backend/cuda/launch.h"
#include "backend/cuda/rank_sum.h"
#include "core/status.h"

namespace llamaserve::cuda {

inline constexpr int kMaxPeerRanks = 8;

// One rank's handles, passed by value to the kernels of a fused reduction. n_ranks == 0: none.
struct PeerReduceView {
  int32_t rank = 0;
  int32_t n_ranks = 0;
  int64_t capacity = 0;  // words (values) of one partial
  // Rank d's inbox: [2 slots][n_ranks][capacity] words.
  unsigned long long* inbox[kMaxPeerRanks] = {};
  unsigned long long* epoch = nullptr;  // this rank's
  unsigned int* arrivals = nullptr;     // this rank's
  const volatile int* abort = nullptr;  // the group's (mapped host memory)
  // Pulled sums (none when pull_slot_bytes == 0): rank d's partials, two slots of
  // pull_slot_bytes at pull[d] (elements of pull_type), its signals (one epoch per rank that
  // signals it), and this rank's pulled-sum epoch.
  void* pull[kMaxPeerRanks] = {};
  int64_t pull_slot_bytes = 0;
  SumType pull_type = SumType::kF32;
  unsigned long long* pull_signals[kMaxPeerRanks] = {};
  unsigned long long* pull_epoch = nullptr;

  bool active() const { return n_ranks > 1; }  // (device code: peer_reduce_active)
  bool pulls() const { return active() && pull_slot_bytes > 0; }
  // Whether a slot holds n_rows rows of partials `stride` elements apart.
  bool pull_fits(int64_t n_rows, int64_t stride) const {
    return pulls() && n_rows * stride * sum_type_bytes(pull_type) <= pull_slot_bytes;
  }
  // This rank's slot `slot`, which its producer writes.
  void* pull_slot(int slot) const {
    return static_cast<char*>(pull[rank]) + slot * pull_slot_bytes;
  }
};

class PeerAllReduce {
 public:
  static constexpr int kMaxRanks = kMaxPeerRanks;

  // Allocates each rank's inbox (2 x n_ranks x capacity words) and counters on its device and
  // enables peer access between every pair; with pull_slot_bytes > 0 also the pulled sums' two
  // slots of that many bytes per rank, of pull_type elements. Fails (the caller then uses NCCL
  // alone) when some pair has no peer access, or a device is listed twice.
  static Result<std::unique_ptr<PeerAllReduce>> create(const std::vector<int>& devices,
                                                       size_t capacity, size_t pull_slot_bytes = 0,
                                                       SumType pull_type = SumType::kF32);
  ~PeerAllReduce();
  PeerAllReduce(const PeerAllReduce&) = delete;
  PeerAllReduce& operator=(const PeerAllReduce&) = delete;

  size_t capacity() const { return capacity_; }
  int n_ranks() const { return static_cast<int>(devices_.size()); }

  // data[0, count) = the sum over ranks of each rank's data[0, count), in place, on `stream`
  // (rank `rank`'s device current). PRECONDITION: count <= capacity().
  Status run(int rank, float* data, size_t count, cudaStream_t stream) const;

  // The handles of rank `rank` for fused reductions (kernels of its device only).
  PeerReduceView view(int rank) const;

  // Makes every kernel waiting for a peer, now or later, return without its peers' partials.
  // For a group whose ranks failed apart; the group is unusable afterwards.
  void abort();

 private:
  PeerAllReduce() = default;
  std::vector<int> devices_;
  size_t capacity_ = 0;
  std::vector<unsigned long long*> inbox_;  // per rank, on its device
  std::vector<unsigned long long*> epoch_;  // per rank, on its device
  std::vector<unsigned int*> arrivals_;     // per rank, on its device
  size_t pull_slot_bytes_ = 0;
  SumType pull_type_ = SumType::kF32;
  std::vector<void*> pull_;                        // per rank: 2 slots
  std::vector<unsigned long long*> pull_signals_;  // per rank: n_ranks epochs
  std::vector<unsigned long long*> pull_epoch_;    // per rank
  int* abort_host_ = nullptr;                      // mapped, pinned host memory
  int* abort_device_ = nullptr;                    // its device address
};

// A pulled sum's producer, after the kernel that wrote this rank's partial into
// view.pull_slot(slot): raises this rank's pulled-sum epoch and signals every peer.
Status peer_pull_signal(const PeerReduceView& view, cudaStream_t stream);

// A pulled sum's consumer where no RMSNorm follows: waits for every peer's signal, then
// x[r, c] += the sum over ranks (in rank order) of the partials in slot `slot` at [r * stride +
// c], for r < n_rows, c < n.
Status peer_pull_add(const PeerReduceView& view, int slot, int64_t stride, float* x,
                     int64_t x_stride, int64_t n_rows, int64_t n, LaunchStream stream);

// Fused reductions' last consumer, where no RMSNorm follows (the end of a layer range):
// x[r, c] += the sum over ranks of the latest reduction's partials [r * n + c], for r <
// n_rows, c < n. PRECONDITION: n_rows * n <= view.capacity.
Status peer_reduce_add(const PeerReduceView& view, float* x, int64_t x_stride, int64_t n_rows,
                       int64_t n, LaunchStream stream);

}  // namespace llamaserve::cuda
