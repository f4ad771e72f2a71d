// Executors for a layout: one device (executor/executor_factory.h), tensor parallel and
// pipeline stages over several GPUs of this process (parallel/), replicas, and tensor parallel
// with one process per GPU (parallel/distributed/). The composition root (ModelService) and
// `tp-worker` build their executors here.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "executor/executor.h"
#include "executor/executor_factory.h"
#include "model/weights.h"

namespace llamaserve {

// Splits `base` into `replicas` executors' options: the devices of base.device in
// consecutive groups of tensor_parallel * pipeline_parallel, one group per replica (on the
// CPU every replica gets threads / replicas cores). Errors name the device count needed.
Result<std::vector<ExecutorOptions>> replica_options(const ExecutorOptions& base, int replicas);

// Builds the executor for options.device (one device, or tensor_parallel * pipeline_parallel
// CUDA devices). Errors: kInvalidArgument for a malformed device or
// option, kUnsupported for a CUDA device in a CPU-only build, and whatever the executor's
// creation returns (kResourceExhausted when the model does not fit, ...).
Result<std::unique_ptr<Executor>> create_executor(std::shared_ptr<const LoadedModel> model,
                                                  const ExecutorOptions& options);

// Tensor parallel with one process per GPU (distributed_tp.h): this process's part in a group
// of options.tensor_parallel ranks, each on its own device (options.device names this
// process's one CUDA device; pipeline_parallel must be 1).
struct TpProcessOptions {
  int rank = 0;
  // Rank 0: where the other ranks connect ("" = every interface; port 0 = any free port).
  std::string listen_host;
  int listen_port = 29500;
  std::function<void(int port)> on_listening;  // rank 0, once it listens
  // Rank r >= 1: rank 0's rendezvous address, "host:port" (parse_host_port).
  std::string coordinator;
  // Rank 0: how long each phase of the rendezvous may take; rank r: how long to keep trying
  // to reach rank 0.
  int64_t rendezvous_timeout_ms = 600000;
};

// Checks this process's part before anything loads: tp >= 2 ranks and no pipeline stages, one
// CUDA device, the rank in [0, tp) and, for ranks >= 1, rank 0's address. Returns the device.
Result<int> tp_process_device(const ExecutorOptions& options, const TpProcessOptions& process);

// Rank 0: the Executor, once every other rank has joined. Errors as create_executor's, and
// kUnsupported in a CPU-only build.
Result<std::unique_ptr<Executor>> create_tp_rank0_executor(std::shared_ptr<const LoadedModel> model,
                                                           const ExecutorOptions& options,
                                                           const TpProcessOptions& process);

// Rank process.rank >= 1: runs rank 0's passes until rank 0 is done with this rank (ok) or
// the group fails (the error). Of `options` only device, tensor_parallel,
// gpu_memory_utilization and on_upload_progress count; rank 0 gives the rest.
Status run_tp_worker_process(std::shared_ptr<const LoadedModel> model,
                             const ExecutorOptions& options, const TpProcessOptions& process);

}  // namespace llamaserve
