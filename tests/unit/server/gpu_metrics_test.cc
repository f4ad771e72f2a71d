// The NVML collector where NVML cannot be had (a library that does not exist, and this
// machine's own when it has no GPU driver): it says so and reads nothing. With NVML present
// (the GPU machine) the same tests check that the devices are read instead.
#include "server/gpu_metrics.h"

#include <dlfcn.h>

#include <gtest/gtest.h>

namespace llamaserve::server {
namespace {

bool nvml_loadable() {
  void* library = dlopen(GpuMetrics::kNvmlLibrary, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return false;
  dlclose(library);
  return true;
}

TEST(GpuMetrics, MissingLibraryIsUnavailable) {
  auto metrics = GpuMetrics::open({0, 1}, "libnvidia-ml-does-not-exist.so.1");
  ASSERT_NE(metrics, nullptr);
  EXPECT_FALSE(metrics->available());
  EXPECT_NE(metrics->unavailable_reason().find("libnvidia-ml-does-not-exist.so.1"),
            std::string::npos)
      << metrics->unavailable_reason();
  EXPECT_TRUE(metrics->sample().empty());
}

TEST(GpuMetrics, LibraryWithoutNvmlIsUnavailable) {
  // A real library that has none of NVML's functions.
  auto metrics = GpuMetrics::open({0}, "libm.so.6");
  EXPECT_FALSE(metrics->available());
  EXPECT_NE(metrics->unavailable_reason().find("nvmlInit_v2"), std::string::npos)
      << metrics->unavailable_reason();
  EXPECT_TRUE(metrics->sample().empty());
}

TEST(GpuMetrics, NoDevicesIsUnavailable) {
  auto metrics = GpuMetrics::open({});
  EXPECT_FALSE(metrics->available());
  EXPECT_TRUE(metrics->sample().empty());
}

TEST(GpuMetrics, SystemNvml) {
  auto metrics = GpuMetrics::open({0});
  if (!nvml_loadable()) {
    EXPECT_FALSE(metrics->available());
    EXPECT_NE(metrics->unavailable_reason().find(GpuMetrics::kNvmlLibrary), std::string::npos)
        << metrics->unavailable_reason();
    EXPECT_TRUE(metrics->sample().empty());
    return;
  }
  // A driver without a GPU 0 (or with NVML refusing to start) is unavailable too.
  if (!metrics->available()) GTEST_SKIP() << metrics->unavailable_reason();
  const std::vector<GpuSample> samples = metrics->sample();
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(samples[0].device, 0);
  ASSERT_TRUE(samples[0].memory_total_bytes.has_value());
  ASSERT_TRUE(samples[0].memory_used_bytes.has_value());
  EXPECT_GT(*samples[0].memory_total_bytes, 0u);
  EXPECT_LE(*samples[0].memory_used_bytes, *samples[0].memory_total_bytes);
  if (samples[0].utilization_percent) {
    EXPECT_LE(*samples[0].utilization_percent, 100u);
  }
}

TEST(NvmlDeviceId, FollowsCudaVisibleDevices) {
  EXPECT_EQ(nvml_device_id(3, nullptr).value(), "3");
  EXPECT_EQ(nvml_device_id(0, "2,3").value(), "2");
  EXPECT_EQ(nvml_device_id(1, "2, 3").value(), "3");
  EXPECT_EQ(nvml_device_id(1, "GPU-aaaa,GPU-bbbb-cccc").value(), "GPU-bbbb-cccc");
  for (auto [ordinal, list] : {std::pair{2, "0,1"}, {0, ""}, {1, "0,"}, {-1, "0"}}) {
    auto missing = nvml_device_id(ordinal, list);
    ASSERT_FALSE(missing.is_ok()) << ordinal << " in '" << list << "'";
    EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
    EXPECT_NE(missing.status().message().find("CUDA_VISIBLE_DEVICES"), std::string::npos);
  }
}

}  // namespace
}  // namespace llamaserve::server
