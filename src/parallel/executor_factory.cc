#include "parallel/executor_factory.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "parallel/cpu_executor.h"
#include "parallel/rendezvous.h"
#if LLAMASERVE_HAS_CUDA
#include "backend/cuda/bandwidth.h"
#include "parallel/cuda_executor.h"
#include "parallel/distributed_tp.h"
#include "parallel/multi_gpu_executor.h"
#endif

namespace llamaserve {
namespace {

Result<int> parse_index(std::string_view digits, std::string_view text) {
  int value = -1;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || error != std::errc() || end != digits.data() + digits.size() || value < 0) {
    return make_error(StatusCode::kInvalidArgument,
                      "device '{}': expected cpu, cuda, cuda:N or a device index N", text);
  }
  return value;
}

#if LLAMASERVE_HAS_CUDA
// A CUDA part's options on `device` from the caller's (every part of an executor starts from
// these).
CudaExecutorOptions cuda_options(const ExecutorOptions& options, int device) {
  CudaExecutorOptions cuda;
  cuda.device = device;
  cuda.gpu_memory_utilization = options.gpu_memory_utilization;
  cuda.kv_capacity_tokens = options.kv_capacity_tokens;
  cuda.kv_block_size = options.kv_block_size;
  if (options.max_batch_tokens > 0) cuda.max_batch_tokens = options.max_batch_tokens;
  if (options.max_seqs > 0) cuda.max_seqs = options.max_seqs;
  cuda.max_context_tokens = options.max_context_tokens;
  return cuda;
}
#endif

}  // namespace

std::string DeviceChoice::name() const {
  return kind == Kind::kCpu ? std::string("cpu") : fmt::format("cuda:{}", index);
}

Result<DeviceChoice> parse_device(std::string_view text) {
  DeviceChoice choice;
  if (text == "cpu") return choice;
  if (text.find(',') != std::string_view::npos) {
    return make_error(StatusCode::kInvalidArgument,
                      "devices '{}': several devices need --tp or --pp (or --replicas)", text);
  }
  choice.kind = DeviceChoice::Kind::kCuda;
  if (text == "cuda") return choice;
  const std::string_view digits = text.starts_with("cuda:") ? text.substr(5) : text;
  LS_ASSIGN_OR_RETURN(choice.index, parse_index(digits, text));
  return choice;
}

Result<std::vector<DeviceChoice>> parse_devices(std::string_view text) {
  std::vector<DeviceChoice> devices;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string_view item = text.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    LS_ASSIGN_OR_RETURN(const DeviceChoice device, parse_device(item));
    if (device.kind == DeviceChoice::Kind::kCpu && (comma != std::string_view::npos || start > 0)) {
      return make_error(StatusCode::kInvalidArgument,
                        "devices '{}': cpu cannot be combined with other devices", text);
    }
    for (const DeviceChoice& seen : devices) {
      if (seen.kind == device.kind && seen.index == device.index) {
        return make_error(StatusCode::kInvalidArgument, "devices '{}': {} is listed twice", text,
                          device.name());
      }
    }
    devices.push_back(device);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return devices;
}

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
        const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
        replica.threads = std::max(1, static_cast<int>(cores) / replicas);
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

bool cuda_build() { return LLAMASERVE_HAS_CUDA != 0; }

Result<std::unique_ptr<Executor>> create_executor(std::shared_ptr<const LoadedModel> model,
                                                  const ExecutorOptions& options) {
  LS_ASSIGN_OR_RETURN(const std::vector<DeviceChoice> devices, parse_devices(options.device));
  const int n_ranks = options.tensor_parallel * options.pipeline_parallel;
  if (options.tensor_parallel < 1 || options.pipeline_parallel < 1) {
    return make_error(StatusCode::kInvalidArgument,
                      "tensor parallel ({}) and pipeline parallel ({}) must be >= 1",
                      options.tensor_parallel, options.pipeline_parallel);
  }
  if (devices.front().kind == DeviceChoice::Kind::kCpu) {
    if (n_ranks != 1) {
      return make_error(StatusCode::kInvalidArgument,
                        "tensor and pipeline parallelism need CUDA devices (--devices 0,1)");
    }
    CpuExecutorOptions cpu;
    cpu.threads = options.threads;
    cpu.kv_capacity_tokens = options.kv_capacity_tokens;
    cpu.kv_block_size = options.kv_block_size;
    if (options.max_batch_tokens > 0) cpu.max_batch_tokens = options.max_batch_tokens;
    return create_cpu_executor(std::move(model), cpu);
  }
  if (static_cast<int>(devices.size()) != n_ranks) {
    return make_error(StatusCode::kInvalidArgument,
                      "tensor parallel {} x pipeline parallel {} need {} devices; '{}' lists {}",
                      options.tensor_parallel, options.pipeline_parallel, n_ranks, options.device,
                      devices.size());
  }
#if LLAMASERVE_HAS_CUDA
  CudaExecutorOptions cuda = cuda_options(options, devices.front().index);
  if (n_ranks == 1) {
    cuda.on_upload_progress = options.on_upload_progress;
    return create_cuda_executor(std::move(model), cuda);
  }
  MultiGpuOptions multi;
  for (const DeviceChoice& device : devices) multi.devices.push_back(device.index);
  multi.tensor_parallel = options.tensor_parallel;
  multi.pipeline_parallel = options.pipeline_parallel;
  multi.layer_split = options.layer_split;
  multi.pipeline_micro_batches = options.pipeline_micro_batches;
  if (options.micro_batch_min_rows > 0) multi.micro_batch_min_rows = options.micro_batch_min_rows;
  return create_multi_gpu_executor(std::move(model), cuda, multi);
#else
  (void)model;
  return make_error(StatusCode::kUnsupported,
                    "device {}: this build has no CUDA support (configure with "
                    "-DLLAMASERVE_CUDA=ON)",
                    devices.front().name());
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
  CudaExecutorOptions cuda = cuda_options(options, device);
  cuda.on_upload_progress = options.on_upload_progress;
  DistributedTpOptions group;
  group.world = options.tensor_parallel;
  group.listen_host = process.listen_host;
  group.port = process.listen_port;
  group.device = device;
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
  CudaExecutorOptions cuda = cuda_options(options, device);
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

Result<double> measure_copy_bandwidth(const DeviceChoice& device, uint64_t bytes, int reps) {
  if (bytes == 0 || reps < 1) {
    return make_error(StatusCode::kInvalidArgument, "measure_copy_bandwidth: bytes and reps > 0");
  }
  if (device.kind == DeviceChoice::Kind::kCuda) {
#if LLAMASERVE_HAS_CUDA
    return cuda::measure_copy_bandwidth(device.index, bytes, reps);
#else
    return make_error(StatusCode::kUnsupported, "device {}: this build has no CUDA support",
                      device.name());
#endif
  }
  // Touch both buffers first so that page faults are not timed.
  std::vector<uint8_t> a(bytes, 1), b(bytes, 0);
  std::vector<double> seconds;
  for (int i = 0; i <= reps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    const auto stop = std::chrono::steady_clock::now();
    if (i > 0) seconds.push_back(std::chrono::duration<double>(stop - start).count());
    a[i % bytes] = b[(i * 7919) % bytes];  // keeps the copies observable
  }
  std::sort(seconds.begin(), seconds.end());
  return 2.0 * static_cast<double>(bytes) / seconds[seconds.size() / 2];
}

}  // namespace llamaserve
