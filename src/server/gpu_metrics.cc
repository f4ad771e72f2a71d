#include "server/gpu_metrics.h"

#include <dlfcn.h>

#include <charconv>
#include <cstdlib>
#include <string_view>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/status.h"

namespace llamaserve::server {
// The few NVML declarations used here, as nvml.h has them (a stable C ABI), so that no NVML
// header is needed to build. A named namespace: GpuMetrics::Nvml's members have these types.
namespace nvml_abi {

using nvmlReturn_t = int;  // an enum in nvml.h; NVML_SUCCESS = 0
constexpr nvmlReturn_t kNvmlSuccess = 0;
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlMemory_t {
  unsigned long long total;  // bytes
  unsigned long long free;
  unsigned long long used;
};
struct nvmlUtilization_t {
  unsigned int gpu;  // percent of the last sample period with a kernel running
  unsigned int memory;
};
constexpr int kNvmlTemperatureGpu = 0;        // NVML_TEMPERATURE_GPU
constexpr unsigned kNvmlNameBufferSize = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE

}  // namespace nvml_abi
using namespace nvml_abi;

Result<std::string> nvml_device_id(int ordinal, const char* cuda_visible_devices) {
  if (cuda_visible_devices == nullptr) return std::to_string(ordinal);
  std::string_view list = cuda_visible_devices;
  for (int i = 0; i < ordinal && !list.empty(); ++i) {
    const size_t comma = list.find(',');
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
  }
  std::string_view entry = list.substr(0, list.find(','));
  while (!entry.empty() && entry.front() == ' ') entry.remove_prefix(1);
  while (!entry.empty() && entry.back() == ' ') entry.remove_suffix(1);
  if (ordinal < 0 || entry.empty()) {
    return make_error(StatusCode::kNotFound, "cuda:{} is not among CUDA_VISIBLE_DEVICES='{}'",
                      ordinal, cuda_visible_devices);
  }
  return std::string(entry);
}

struct GpuMetrics::Nvml {
  void* library = nullptr;
  bool initialized = false;
  nvmlReturn_t (*init)() = nullptr;  // nvmlInit_v2
  nvmlReturn_t (*shutdown)() = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*handle_by_index)(unsigned, nvmlDevice_t*) = nullptr;  // _v2
  nvmlReturn_t (*handle_by_uuid)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*memory_info)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned*) = nullptr;

  ~Nvml() {
    if (initialized) shutdown();
    if (library != nullptr) dlclose(library);
  }

  std::string error(nvmlReturn_t code) const {
    const char* text = error_string != nullptr ? error_string(code) : nullptr;
    return text != nullptr ? fmt::format("{} (NVML error {})", text, code)
                           : fmt::format("NVML error {}", code);
  }

  // Loads the library and resolves every function; an error names what is missing.
  Status load(const std::string& path) {
    library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      const char* why = dlerror();
      return make_error(StatusCode::kUnavailable, "cannot load {}: {}", path,
                        why != nullptr ? why : "unknown error");
    }
    LS_RETURN_IF_ERROR(resolve(path, "nvmlInit_v2", init));
    LS_RETURN_IF_ERROR(resolve(path, "nvmlShutdown", shutdown));
    LS_RETURN_IF_ERROR(resolve(path, "nvmlErrorString", error_string));
    LS_RETURN_IF_ERROR(resolve(path, "nvmlDeviceGetHandleByIndex_v2", handle_by_index));
    LS_RETURN_IF_ERROR(resolve(path, "nvmlDeviceGetHandleByUUID", handle_by_uuid));
    LS_RETURN_IF_ERROR(resolve(path, "nvmlDeviceGetName", name));
    LS_RETURN_IF_ERROR(resolve(path, "nvmlDeviceGetMemoryInfo", memory_info));
    LS_RETURN_IF_ERROR(resolve(path, "nvmlDeviceGetUtilizationRates", utilization));
    LS_RETURN_IF_ERROR(resolve(path, "nvmlDeviceGetTemperature", temperature));
    const nvmlReturn_t status = init();
    if (status != kNvmlSuccess) {
      return make_error(StatusCode::kUnavailable, "nvmlInit failed: {}", error(status));
    }
    initialized = true;
    return Status::ok();
  }

  template <typename Fn>
  Status resolve(const std::string& path, const char* symbol, Fn& function) {
    void* address = dlsym(library, symbol);
    if (address == nullptr) {
      return make_error(StatusCode::kUnavailable, "{} has no {}", path, symbol);
    }
    function = reinterpret_cast<Fn>(address);
    return Status::ok();
  }

  // The NVML device that CUDA calls `ordinal`.
  Result<nvmlDevice_t> device_for_ordinal(int ordinal,
                                          const std::optional<std::string>& visible) const {
    LS_ASSIGN_OR_RETURN(const std::string entry,
                        nvml_device_id(ordinal, visible ? visible->c_str() : nullptr));
    nvmlDevice_t device = nullptr;
    nvmlReturn_t status = kNvmlSuccess;
    unsigned index = 0;
    const auto [end, parse_error] =
        std::from_chars(entry.data(), entry.data() + entry.size(), index);
    if (entry.starts_with("GPU-")) {
      status = handle_by_uuid(entry.c_str(), &device);
    } else if (parse_error == std::errc() && end == entry.data() + entry.size()) {
      status = handle_by_index(index, &device);
    } else {
      return make_error(StatusCode::kNotFound,
                        "cuda:{}: CUDA_VISIBLE_DEVICES entry '{}' is neither a device index nor "
                        "a GPU- UUID",
                        ordinal, entry);
    }
    if (status != kNvmlSuccess) {
      return make_error(StatusCode::kNotFound, "cuda:{} (NVML device {}): {}", ordinal, entry,
                        error(status));
    }
    return device;
  }
};

std::unique_ptr<GpuMetrics> GpuMetrics::open(
    const std::vector<int>& cuda_devices, const std::string& nvml_library,
    const std::optional<std::string>& cuda_visible_devices) {
  std::unique_ptr<GpuMetrics> metrics(new GpuMetrics());
  auto nvml = std::make_unique<Nvml>();
  if (cuda_devices.empty()) {
    metrics->unavailable_reason_ = "no CUDA devices to report";
  } else if (Status loaded = nvml->load(nvml_library); !loaded.is_ok()) {
    metrics->unavailable_reason_ = loaded.message();
  } else {
    for (int ordinal : cuda_devices) {
      Result<nvmlDevice_t> device = nvml->device_for_ordinal(ordinal, cuda_visible_devices);
      if (!device.is_ok()) {
        spdlog::debug("gpu metrics: leaving out {}", device.status().message());
        continue;
      }
      char name[kNvmlNameBufferSize] = {};
      if (nvml->name(*device, name, sizeof(name)) != kNvmlSuccess) name[0] = '\0';
      spdlog::info("gpu metrics: device {} is {} (NVML)", ordinal, name[0] ? name : "a GPU");
      metrics->devices_.push_back({ordinal, *device});
    }
    if (metrics->devices_.empty()) {
      metrics->unavailable_reason_ = "NVML found none of the devices";
    } else {
      metrics->nvml_ = std::move(nvml);
    }
  }
  if (!metrics->available()) {
    spdlog::debug("gpu metrics: unavailable: {}", metrics->unavailable_reason_);
  }
  return metrics;
}

GpuMetrics::~GpuMetrics() = default;

std::vector<GpuSample> GpuMetrics::sample() {
  std::vector<GpuSample> samples;
  if (!available()) return samples;
  std::lock_guard lock(sample_mutex_);
  for (const Device& device : devices_) {
    auto handle = static_cast<nvmlDevice_t>(device.handle);
    GpuSample sample;
    sample.device = device.cuda_ordinal;
    nvmlMemory_t memory{};
    if (nvml_->memory_info(handle, &memory) == kNvmlSuccess) {
      sample.memory_used_bytes = memory.used;
      sample.memory_total_bytes = memory.total;
    }
    nvmlUtilization_t utilization{};
    if (nvml_->utilization(handle, &utilization) == kNvmlSuccess) {
      sample.utilization_percent = utilization.gpu;
    }
    unsigned temperature = 0;
    if (nvml_->temperature(handle, kNvmlTemperatureGpu, &temperature) == kNvmlSuccess) {
      sample.temperature_celsius = temperature;
    }
    samples.push_back(sample);
  }
  return samples;
}

}  // namespace llamaserve::server
