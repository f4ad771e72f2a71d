// Devices and the executors of one device: one place that turns a device choice ("cpu",
// "cuda:0", or the index list of --devices) into an Executor, so that every entry point takes
// the same --device values and gives the same errors. Layouts over several devices (tensor and
// pipeline parallel, replicas, ranks in other processes) are assembled from these by
// service/layout_factory.h. CUDA devices exist only in builds configured with LLAMASERVE_CUDA=ON.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/cpu/cpu_isa.h"
#include "backend/kernel_tuning.h"
#include "core/status.h"
#include "executor/executor.h"
#include "executor/tp_sums.h"
#include "model/weights.h"

namespace llamaserve {

struct CudaExecutorOptions;

struct DeviceChoice {
  enum class Kind { kCpu, kCuda };
  Kind kind = Kind::kCpu;
  int index = 0;             // CUDA device ordinal
  std::string name() const;  // "cpu" or "cuda:N"
};

// Accepts "cpu", "cuda" (= cuda:0), "cuda:N" and "N" (a device index, as --devices 0 gives).
// Several devices ("0,1") are refused here: see parse_devices.
Result<DeviceChoice> parse_device(std::string_view text);

// A device list: "cpu", or CUDA devices as "0,1", "cuda:0,cuda:1" or a single device in any
// form parse_device takes. Duplicates are refused.
Result<std::vector<DeviceChoice>> parse_devices(std::string_view text);

// True when this build can run models on CUDA devices.
bool cuda_build();

// What every executor needs, in the units callers think in. Zero means the executor's
// default for the field.
struct ExecutorOptions {
  // "cpu", one CUDA device, or tensor_parallel * pipeline_parallel CUDA devices ("0,1"; see
  // parse_devices). Replicas are separate executors, each given its own devices.
  std::string device = "cpu";
  int tensor_parallel = 1;    // ranks that split every layer's heads and FFN columns (NCCL)
  int pipeline_parallel = 1;  // stages that each run a contiguous block of layers
  // Layers per pipeline stage (sums to n_layer); empty = balanced by weight bytes.
  std::vector<int32_t> layer_split;
  // Pipeline: micro-batches in flight per pass (MultiGpuOptions); 0 = one per stage, 1 = off.
  int32_t pipeline_micro_batches = 0;
  int32_t micro_batch_min_rows = 0;  // rows each micro-batch needs at least; 0 = the default
  int threads = 0;                   // CPU threads; 0 = all online cores
  cpu::CpuIsa cpu_isa = cpu::CpuIsa::kAuto;  // CPU kernels: AVX-512 where the CPU has it, or AVX2
  // KV capacity in tokens over all sequences. CPU: 0 = four sequences of min(n_ctx, 8192);
  // CUDA: 0 = everything the memory budget leaves.
  int64_t kv_capacity_tokens = 0;
  int32_t kv_block_size = 16;
  // KV cache elements: F16, or Q8_0 (about half the bytes).
  TensorType kv_type = TensorType::F16;
  int32_t max_batch_tokens = 0;    // rows per forward pass; 0 = the executor's default
  int64_t max_context_tokens = 0;  // CUDA: longest sequence (block table width); 0 = n_ctx_train
  int32_t max_seqs = 0;            // CUDA: sequences per pass; 0 = its default (256)
  double gpu_memory_utilization = 0.90;  // CUDA: fraction of the device this instance may use
  TpSums tp_sums;                        // tensor parallel: how the ranks sum their partials
  KernelTuning tuning;                   // CUDA
  // CUDA, one device: reports the weight upload (see LoadProgressFn). Several devices log a
  // line per part instead.
  LoadProgressFn on_upload_progress;
};

// Builds the executor of one device: the CPU, or one CUDA device with tensor_parallel and
// pipeline_parallel 1. Errors: kInvalidArgument for a malformed device or option, kUnsupported
// for a CUDA device in a CPU-only build, and whatever the executor's creation returns
// (kResourceExhausted when the model does not fit, ...).
Result<std::unique_ptr<Executor>> create_device_executor(std::shared_ptr<const LoadedModel> model,
                                                         const ExecutorOptions& options);

// CUDA builds: the options of one CUDA part on `device` from the caller's (every part of a
// multi-GPU executor starts from these).
CudaExecutorOptions cuda_executor_options(const ExecutorOptions& options, int device);

// The memory bandwidth a benchmark on `device` compares against, in bytes (read + written)
// per second: CUDA, a device-to-device copy of `bytes` (median of `reps`, timed with events);
// CPU, memcpy between two host buffers of `bytes`.
Result<double> measure_copy_bandwidth(const DeviceChoice& device, uint64_t bytes, int reps);

// Device memory held by every executor's pools in this process, in bytes (0 without CUDA):
// what unloading every model must give back.
uint64_t device_pool_live_bytes();

}  // namespace llamaserve
