#include "service/layout_factory.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include <fmt/format.h>

#include "core/thread_pool.h"
#include "parallel/distributed/rendezvous.h"
#if LLAMASERVE_HAS_CUDA
#include "executor/cuda_executor.h"
#include "parallel/distributed/distributed_tp.h"
#include "parallel/multi_gpu_executor.h"
#endif

namespace llamaserve {

Result<std::vector<ExecutorOptions>> replica_options(const ExecutorOptions& base, int replicas) {
  if (replicas < 1 || base.tensor_parallel < 1 || base.pipeline_parallel < 1) {
    return make_error(StatusCode::kInvalidArgument,
                      "replicas ({}), tensor parallel ({}) and pipeline parallel ({}) must be >= 1",
                      replicas, base.tensor_parallel, base.pipeline_parallel);
  }
  LS_ASSIGN_OR_RETURN(const std::vector<DeviceChoice> devices, parse_devices(base.device));
  std::vector<ExecutorOptions> out;
  if (devices.front().kind == DeviceChoice::Kind::kCpu) {
    if (base.tensor_parallel * base.pipeline_parallel != 1) {
      return make_error(StatusCode::kInvalidArgument,
                        "tensor and pipeline parallelism need CUDA devices (--devices 0,1)");
    }
    for (int r = 0; r < replicas; ++r) {
      ExecutorOptions replica = base;
      if (base.threads > 0) replica.threads = std::max(1, base.threads / replicas);
      if (base.threads == 0 && replicas > 1) {
        replica.threads = std::max(1, ThreadPool::default_threads() / replicas);
      }
      out.push_back(std::move(replica));
    }
    return out;
  }
  const int per_replica = base.tensor_parallel * base.pipeline_parallel;
  if (static_cast<int>(devices.size()) != per_replica * replicas) {
    return make_error(StatusCode::kInvalidArgument,
                      "{} replicas x tensor parallel {} x pipeline parallel {} need {} devices; "
                      "--devices '{}' lists {}",
                      replicas, base.tensor_parallel, base.pipeline_parallel,
                      per_replica * replicas, base.device, devices.size());
  }
  for (int r = 0; r < replicas; ++r) {
    ExecutorOptions replica = base;
    replica.device.clear();
    for (int i = 0; i < per_replica; ++i) {
      if (i > 0) replica.device += ',';
      replica.device += devices[static_cast<size_t>(r * per_replica + i)].name();
    }
    out.push_back(std::move(replica));
  }
  return out;
}

Result<std::unique_ptr<Executor>> create_executor(std::shared_ptr<const LoadedModel> model,
                                                  const ExecutorOptions& options) {
  LS_ASSIGN_OR_RETURN(const std::vector<DeviceChoice> devices, parse_devices(options.device));
  const int n_ranks = options.tensor_parallel * options.pipeline_parallel;
  if (options.tensor_parallel < 1 || options.pipeline_parallel < 1) {
    return make_error(StatusCode::kInvalidArgument,
                      "tensor parallel ({}) and pipeline parallel ({}) must be >= 1",
                      options.tensor_parallel, options.pipeline_parallel);
  }
  if (devices.front().kind == DeviceChoice::Kind::kCpu && n_ranks != 1) {
    return make_error(StatusCode::kInvalidArgument,
                      "tensor and pipeline parallelism need CUDA devices (--devices 0,1)");
  }
  if (static_cast<int>(devices.size()) != n_ranks) {
    return make_error(StatusCode::kInvalidArgument,
                      "tensor parallel {} x pipeline parallel {} need {} devices; '{}' lists {}",
                      options.tensor_parallel, options.pipeline_parallel, n_ranks, options.device,
                      devices.size());
  }
  if (n_ranks == 1) return create_device_executor(std::move(model), options);
#if LLAMASERVE_HAS_CUDA
  MultiGpuOptions multi;
  for (const DeviceChoice& device : devices) multi.devices.push_back(device.index);
  multi.tensor_parallel = options.tensor_parallel;
  multi.pipeline_parallel = options.pipeline_parallel;
  multi.layer_split = options.layer_split;
  multi.pipeline_micro_batches = options.pipeline_micro_batches;
  if (options.micro_batch_min_rows > 0) multi.micro_batch_min_rows = options.micro_batch_min_rows;
  multi.tp_sums = options.tp_sums;
  return create_multi_gpu_executor(std::move(model),
                                   cuda_executor_options(options, devices.front().index), multi);
#else
  (void)model;
  return make_error(StatusCode::kUnsupported, "devices {}: this build has no CUDA support",
                    options.device);
#endif
}
Result<int> tp_process_device(const ExecutorOptions& options, const TpProcessOptions& process) {
  if (options.tensor_parallel < 2 || options.pipeline_parallel != 1) {
    return make_error(StatusCode::kInvalidArgument,
                      "tensor parallel across processes needs --tp 2 or more (the ranks of the "
                      "group) and no pipeline stages; got --tp {} --pp {}",
                      options.tensor_parallel, options.pipeline_parallel);
  }
  if (process.rank < 0 || process.rank >= options.tensor_parallel) {
    return make_error(StatusCode::kInvalidArgument, "--tp-rank {} outside [0, {}] (--tp {})",
                      process.rank, options.tensor_parallel - 1, options.tensor_parallel);
  }
  if (process.rank > 0) {
    auto coordinator = parse_host_port(process.coordinator);
    if (!coordinator.is_ok()) return coordinator.status().with_context("--tp-coordinator");
  }
  LS_ASSIGN_OR_RETURN(const std::vector<DeviceChoice> devices, parse_devices(options.device));
  if (devices.size() != 1 || devices.front().kind != DeviceChoice::Kind::kCuda) {
    return make_error(StatusCode::kInvalidArgument,
                      "with one process per GPU each process runs on one CUDA device "
                      "(--device cuda:N), not '{}'",
                      options.device);
  }
  return devices.front().index;
}

Result<std::unique_ptr<Executor>> create_tp_rank0_executor(std::shared_ptr<const LoadedModel> model,
                                                           const ExecutorOptions& options,
                                                           const TpProcessOptions& process) {
  LS_ASSIGN_OR_RETURN(const int device, tp_process_device(options, process));
  if (process.rank != 0) {
    return make_error(StatusCode::kInvalidArgument,
                      "the server is rank 0 of its tensor-parallel group, not rank {}: start the "
                      "other ranks with `llamaserve tp-worker`",
                      process.rank);
  }
#if LLAMASERVE_HAS_CUDA
  CudaExecutorOptions cuda = cuda_executor_options(options, device);
  cuda.on_upload_progress = options.on_upload_progress;
  DistributedTpOptions group;
  group.world = options.tensor_parallel;
  group.listen_host = process.listen_host;
  group.port = process.listen_port;
  group.device = device;
  group.half_gemm_sums = options.tp_sums.half_gemm_sums;
  group.rendezvous_timeout = std::chrono::milliseconds(process.rendezvous_timeout_ms);
  group.on_listening = process.on_listening;
  return create_distributed_tp_executor(std::move(model), cuda, group);
#else
  (void)model;
  return make_error(StatusCode::kUnsupported, "device cuda:{}: this build has no CUDA support",
                    device);
#endif
}

Status run_tp_worker_process(std::shared_ptr<const LoadedModel> model,
                             const ExecutorOptions& options, const TpProcessOptions& process) {
  LS_ASSIGN_OR_RETURN(const int device, tp_process_device(options, process));
  if (process.rank == 0) {
    return make_error(StatusCode::kInvalidArgument,
                      "rank 0 of a tensor-parallel group is the server (`llamaserve serve "
                      "--tp-rank 0`), not a worker");
  }
  LS_ASSIGN_OR_RETURN(const HostPort coordinator, parse_host_port(process.coordinator));
#if LLAMASERVE_HAS_CUDA
  CudaExecutorOptions cuda = cuda_executor_options(options, device);
  cuda.on_upload_progress = options.on_upload_progress;
  TpWorkerOptions worker;
  worker.rank = process.rank;
  worker.world = options.tensor_parallel;
  worker.coordinator = coordinator;
  worker.device = device;
  worker.connect_timeout = std::chrono::milliseconds(process.rendezvous_timeout_ms);
  return run_tp_worker(std::move(model), cuda, worker);
#else
  (void)model;
  return make_error(StatusCode::kUnsupported, "device cuda:{}: this build has no CUDA support",
                    device);
#endif
}

}  // namespace llamaserve
