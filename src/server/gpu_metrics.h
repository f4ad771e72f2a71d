// Per-GPU readings for /metrics (memory used and total, utilization, temperature) from NVML,
// which is loaded at run time with dlopen: the server has no link-time dependency on the
// driver, and on a machine without it the GPU series are left out, not faked.
//
// Devices are named by their CUDA ordinal, as --devices gives them. NVML numbers devices in
// PCI bus order, the CUDA runtime fastest first: the two agree on machines whose GPUs are all
// of one model, and everywhere with CUDA_DEVICE_ORDER=PCI_BUS_ID. CUDA_VISIBLE_DEVICES is
// followed (indices and GPU- UUIDs), so that device "0" is the GPU the executor runs on.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace llamaserve::server {

// One device at one scrape. A reading NVML refuses (a temperature the board does not report,
// say) is left empty, and so is its series.
struct GpuSample {
  int device = 0;  // CUDA ordinal: the label device="N"
  std::optional<uint64_t> memory_used_bytes;
  std::optional<uint64_t> memory_total_bytes;
  std::optional<uint32_t> utilization_percent;  // kernels running, over NVML's last period
  std::optional<uint32_t> temperature_celsius;
};

// How NVML should find CUDA device `ordinal`: its CUDA_VISIBLE_DEVICES entry (an index or a
// GPU- UUID, spaces trimmed) when `cuda_visible_devices` is set, else the ordinal itself.
// kNotFound when the list has no such entry.
Result<std::string> nvml_device_id(int ordinal, const char* cuda_visible_devices);

class GpuMetrics {
 public:
  static constexpr const char* kNvmlLibrary = "libnvidia-ml.so.1";

  // Loads `nvml_library`, initializes NVML and finds every device of `cuda_devices`, CUDA
  // ordinals as the process's CUDA_VISIBLE_DEVICES (none: unset) maps them. Never fails: when
  // NVML or a device cannot be had, the collector is unavailable (or leaves that device out)
  // and says why once, at debug level.
  static std::unique_ptr<GpuMetrics> open(
      const std::vector<int>& cuda_devices, const std::string& nvml_library = kNvmlLibrary,
      const std::optional<std::string>& cuda_visible_devices = std::nullopt);
  ~GpuMetrics();
  GpuMetrics(const GpuMetrics&) = delete;
  GpuMetrics& operator=(const GpuMetrics&) = delete;

  // True when NVML is loaded and at least one device was found.
  bool available() const { return unavailable_reason_.empty(); }
  // Why not, for logs and tests; empty when available.
  const std::string& unavailable_reason() const { return unavailable_reason_; }

  // Reads every device found; empty when unavailable. Thread-safe.
  std::vector<GpuSample> sample();

 private:
  struct Nvml;  // the loaded library: handle and function pointers
  struct Device {
    int cuda_ordinal = 0;
    void* handle = nullptr;  // nvmlDevice_t
  };

  GpuMetrics() = default;

  std::unique_ptr<Nvml> nvml_;
  std::vector<Device> devices_;
  std::string unavailable_reason_;
  std::mutex sample_mutex_;
};

}  // namespace llamaserve::server
