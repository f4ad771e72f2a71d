#include "executor/executor_factory.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "executor/cpu_executor.h"
#if LLAMASERVE_HAS_CUDA
#include "backend/cuda/bandwidth.h"
#include "backend/cuda/device_pool.h"
#include "executor/cuda_executor.h"
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

}  // namespace

#if LLAMASERVE_HAS_CUDA
// A CUDA part's options on `device` from the caller's (every part of an executor starts from
// these).
CudaExecutorOptions cuda_executor_options(const ExecutorOptions& options, int device) {
  CudaExecutorOptions cuda;
  cuda.device = device;
  cuda.gpu_memory_utilization = options.gpu_memory_utilization;
  cuda.kv_capacity_tokens = options.kv_capacity_tokens;
  cuda.kv_block_size = options.kv_block_size;
  cuda.kv_type = options.kv_type;
  if (options.max_batch_tokens > 0) cuda.max_batch_tokens = options.max_batch_tokens;
  if (options.max_seqs > 0) cuda.max_seqs = options.max_seqs;
  cuda.max_context_tokens = options.max_context_tokens;
  cuda.tuning = options.tuning;
  return cuda;
}
#endif

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

bool cuda_build() { return LLAMASERVE_HAS_CUDA != 0; }

Result<std::unique_ptr<Executor>> create_device_executor(std::shared_ptr<const LoadedModel> model,
                                                         const ExecutorOptions& options) {
  LS_ASSIGN_OR_RETURN(const std::vector<DeviceChoice> devices, parse_devices(options.device));
  if (devices.size() != 1 || options.tensor_parallel != 1 || options.pipeline_parallel != 1) {
    return make_error(
        StatusCode::kInvalidArgument,
        "one device expected, got '{}' with tensor parallel {} x pipeline parallel {}",
        options.device, options.tensor_parallel, options.pipeline_parallel);
  }
  if (devices.front().kind == DeviceChoice::Kind::kCpu) {
    CpuExecutorOptions cpu;
    cpu.threads = options.threads;
    cpu.cpu_isa = options.cpu_isa;
    cpu.kv_capacity_tokens = options.kv_capacity_tokens;
    cpu.kv_block_size = options.kv_block_size;
    cpu.kv_type = options.kv_type;
    if (options.max_batch_tokens > 0) cpu.max_batch_tokens = options.max_batch_tokens;
    return create_cpu_executor(std::move(model), cpu);
  }
#if LLAMASERVE_HAS_CUDA
  CudaExecutorOptions cuda = cuda_executor_options(options, devices.front().index);
  cuda.on_upload_progress = options.on_upload_progress;
  return create_cuda_executor(std::move(model), cuda);
#else
  (void)model;
  return make_error(StatusCode::kUnsupported,
                    "device {}: this build has no CUDA support (configure with "
                    "-DLLAMASERVE_CUDA=ON)",
                    devices.front().name());
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

uint64_t device_pool_live_bytes() {
#if LLAMASERVE_HAS_CUDA
  return cuda::DevicePool::live_bytes();
#else
  return 0;
#endif
}

}  // namespace llamaserve
