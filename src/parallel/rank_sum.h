// The ways a tensor-parallel rank sums its partial results (cuda::RankSum, which the CUDA
// backend calls at each block's output projection and at the consumer of its sum), one class
// per TpSumMode (in rank_sum.cc):
//  - NcclRankSum (kNccl, and ranks in separate processes): an NCCL all-reduce after each output
//    projection, of the residual rows (the primary rank adding the residual to its partial) or,
//    for GEMM projections with half sums, of half partials that the next RMSNorm (or an add at
//    the end of the layer range) adds to the residual.
//  - PeerCopyRankSum (kPeer): the same, with fp32 sums of up to the peer group's capacity
//    (decode rows) through the one-kernel peer-to-peer all-reduce.
//  - FusedRankSum (kFused): matvec projections write fused reductions and GEMM projections
//    pulled sums (peer_all_reduce.h), each completed by the next RMSNorm (or an add at the end
//    of the layer range); the rest as NcclRankSum.
// make_rank_sum picks one from the mode and what the group has. Built only with
// LLAMASERVE_CUDA.
#pragma once

#include <memory>

#include <nccl.h>

#include "backend/cuda/peer_all_reduce.h"
#include "backend/cuda/rank_sum.h"
#include "executor/tp_sums.h"
#include "parallel/rank_barrier.h"

namespace llamaserve {

// What a rank's sums run on. The caller owns what it points to (a stage of the multi-GPU
// executor, or a process's communicator) and keeps it until every part that sums through it
// is gone.
struct RankSumSetup {
  int rank = 0;  // rank 0 is the primary rank
  // The partials of the GEMM output projections are summed as halves (f16, or bf16 for BF16
  // weights) instead of fp32 (TpSums::half_gemm_sums).
  bool half_gemm_sums = true;
  // The rank's NCCL communicator, read at each sum (ranks in separate processes create it once
  // every part holds its weights); `comm_owner`, when set, is kept alive with the sums.
  const ncclComm_t* comm = nullptr;
  std::shared_ptr<const void> comm_owner;
  // Ranks of one process: where they meet before queuing a kernel that waits for the others
  // (rank_barrier.h). Null: ranks in separate processes, which need no meeting.
  RankBarrier* barrier = nullptr;
  // The group's peer-to-peer reductions (TpSumMode kPeer, kFused). Null: NCCL alone.
  const cuda::PeerAllReduce* peer = nullptr;
};

// Rank setup.rank's way of `mode`: FusedRankSum or PeerCopyRankSum where the mode asks for it
// and the group has peer-to-peer reductions (setup.peer), else NcclRankSum (ranks in separate
// processes: kNccl).
std::shared_ptr<const cuda::RankSum> make_rank_sum(TpSumMode mode, const RankSumSetup& setup);

}  // namespace llamaserve
