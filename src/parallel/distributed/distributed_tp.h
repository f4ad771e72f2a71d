// Tensor parallel with one process per GPU: the same ranks as the in-process executor
// (multi_gpu_executor.h; tp_rank.h has what they share), each in a process of its own, on one
// host or several. Rank 0 is the Executor the engine drives; it runs the rendezvous
// (rendezvous.h), and every pass it sends the batch to the other ranks, runs its own shard and
// collects their statuses. The other ranks run run_tp_worker() until rank 0 is done with them.
//
// Every rank builds its part from the same options (rank 0 hands them out in the setup, so
// that every rank cuts a batch into the same pieces and pads them alike and their all-reduces
// pair up), holds the KV block count the smallest budget allows, and joins one NCCL
// communicator (ncclCommInitRank on the unique id rank 0 made). A failing rank ends the group:
// rank 0 aborts its communicator and every later pass fails with the reason; the other ranks
// abort theirs and exit with an error. Built only with LLAMASERVE_CUDA.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "executor/cuda_executor.h"
#include "executor/executor.h"
#include "model/weights.h"
#include "parallel/distributed/rendezvous.h"

namespace llamaserve {

struct DistributedTpOptions {
  int world = 2;            // ranks in the group, rank 0 (this process) included
  std::string listen_host;  // where the other ranks connect: "" = every interface
  int port = 29500;         // 0: any free port (tests; on_listening says which)
  int device = 0;           // this process's CUDA device
  // The partials of the GEMM output projections are summed as halves (TpSums::half_gemm_sums;
  // the other ranks take it from rank 0). The ranks sum through NCCL alone.
  bool half_gemm_sums = true;
  // How long each phase of the rendezvous may take: every rank joining, planning, uploading
  // its weights (minutes for a large model), creating the communicator.
  std::chrono::milliseconds rendezvous_timeout{std::chrono::minutes(10)};
  // How long a pass may take before rank 0 gives up on a rank that does not answer.
  std::chrono::milliseconds step_timeout{std::chrono::minutes(5)};
  // Called once rank 0 listens, before it waits for the other ranks.
  std::function<void(int port)> on_listening;
};

// Rank 0. `base` gives the part's options except the device and its role; the other ranks get
// them in the setup. Returns once every rank is up, or with the first error of any rank.
Result<std::unique_ptr<Executor>> create_distributed_tp_executor(
    std::shared_ptr<const LoadedModel> model, const CudaExecutorOptions& base,
    const DistributedTpOptions& options);

struct TpWorkerOptions {
  int rank = 1;
  int world = 2;
  HostPort coordinator;  // rank 0's rendezvous address
  int device = 0;        // this process's CUDA device
  // How long to keep trying to reach rank 0 (it may still be loading the model).
  std::chrono::milliseconds connect_timeout{std::chrono::minutes(10)};
};

// Rank options.rank: joins rank 0, builds its part (only base.gpu_memory_utilization and
// base.on_upload_progress are its own; the rest comes from rank 0's setup) and runs every batch
// rank 0 sends until rank 0 shuts the group down or closes the connection between steps (ok:
// the GPU is freed when this returns), or until something fails (the error; rank 0 has been told
// when it can still hear).
Status run_tp_worker(std::shared_ptr<const LoadedModel> model, const CudaExecutorOptions& base,
                     const TpWorkerOptions& options);

}  // namespace llamaserve
