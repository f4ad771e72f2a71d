// The layout the executor and engine GPU tests run in, so that one suite checks every way of
// spreading a model over GPUs: LLAMASERVE_TEST_LAYOUT names it (scripts/device_run.sh runs the
// suite once per entry of GPU_TEST_LAYOUTS).
//
//   one        the single-GPU executor on cuda:0 (the default)
//   tpN        tensor parallel over cuda:0..N-1
//   ppN        a pipeline of N stages over the devices present, round robin
//   ppNmb      the same with micro-batches in flight from 1 row on (where no device serves two
//              stages), so that small test batches take that path too
//   tpNxppM    tp x pp: M stages of N ranks, the devices of each stage round robin
//   replicasN  engines: an EngineGroup of N one-GPU replicas (cuda:r mod the device count);
//              executors: one GPU, the last replica's device
//
// A layout that cannot run a model here (tensor parallel that does not divide its heads or
// quantization blocks, more ranks in a stage than devices) skips the test with the reason.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "core/status.h"
#include "executor/cuda_executor.h"
#include "executor/executor.h"
#include "model/weights.h"
#include "parallel/multi_gpu_executor.h"
#include "parallel/tp_shard.h"

namespace llamaserve::testing {

struct TestLayout {
  std::string name = "one";
  int tp = 1;
  int pp = 1;
  int replicas = 1;
  bool micro_batches = false;  // ppNmb

  bool multi_gpu() const { return tp * pp > 1; }
};

// "one", "tp2", "pp2", "pp2mb", "tp2xpp2", "replicas2"; kInvalidArgument for anything else.
inline Result<TestLayout> parse_test_layout(std::string_view text) {
  TestLayout layout;
  layout.name = std::string(text);
  if (text == "one") return layout;
  auto number = [&](std::string_view digits, int& out) {
    if (digits.empty() || digits.size() > 2) return false;
    out = 0;
    for (char ch : digits) {
      if (ch < '0' || ch > '9') return false;
      out = out * 10 + (ch - '0');
    }
    return out >= 1;
  };
  auto starts = [&](std::string_view prefix) { return text.substr(0, prefix.size()) == prefix; };
  bool ok = false;
  if (starts("replicas")) {
    ok = number(text.substr(8), layout.replicas);
  } else if (starts("tp")) {
    const size_t x = text.find("xpp");
    ok = x == std::string_view::npos
             ? number(text.substr(2), layout.tp)
             : number(text.substr(2, x - 2), layout.tp) && number(text.substr(x + 3), layout.pp);
  } else if (starts("pp")) {
    std::string_view rest = text.substr(2);
    if (rest.size() > 2 && rest.substr(rest.size() - 2) == "mb") {
      layout.micro_batches = true;
      rest.remove_suffix(2);
    }
    ok = number(rest, layout.pp);
  }
  if (!ok) {
    return make_error(StatusCode::kInvalidArgument,
                      "LLAMASERVE_TEST_LAYOUT={}: expected one, tpN, ppN, ppNmb, tpNxppM or "
                      "replicasN",
                      text);
  }
  return layout;
}

// The layout of this run (LLAMASERVE_TEST_LAYOUT); a malformed value fails the test.
inline TestLayout test_layout() {
  const char* env = std::getenv("LLAMASERVE_TEST_LAYOUT");
  if (env == nullptr || *env == '\0') return {};
  auto layout = parse_test_layout(env);
  if (!layout.is_ok()) {
    ADD_FAILURE() << layout.status().to_string();
    return {};
  }
  return *layout;
}

inline int device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

// Why `layout` cannot run `model` on this machine; empty when it can.
inline std::string layout_unfit(const TestLayout& layout, const LoadedModel& model) {
  const int devices = device_count();
  if (layout.tp > devices) {
    return fmt::format("layout {}: {} ranks per stage need as many GPUs, {} present", layout.name,
                       layout.tp, devices);
  }
  if (layout.tp > 1) {
    const Status split = check_tensor_parallel(model, layout.tp);
    if (!split.is_ok()) return fmt::format("layout {}: {}", layout.name, split.message());
  }
  if (layout.pp > model.config.n_layer) {
    return fmt::format("layout {}: {} stages for {} layers", layout.name, layout.pp,
                       model.config.n_layer);
  }
  return {};
}

#define LLAMASERVE_SKIP_UNLESS_LAYOUT_FITS(layout, model)                              \
  do {                                                                                 \
    const std::string unfit_ = ::llamaserve::testing::layout_unfit((layout), (model)); \
    if (!unfit_.empty()) GTEST_SKIP() << unfit_;                                       \
  } while (0)

// The devices of a multi-GPU layout: stage by stage, each stage's ranks on distinct devices
// round robin over the GPUs present.
inline std::vector<int> layout_devices(const TestLayout& layout) {
  const int n = std::max(device_count(), 1);
  std::vector<int> devices;
  for (int s = 0; s < layout.pp; ++s) {
    for (int r = 0; r < layout.tp; ++r) devices.push_back((s * layout.tp + r) % n);
  }
  return devices;
}

// The executor `layout` runs `model` in, each part with `base`'s options. `replica` picks the
// device of a one-GPU replica (replicasN).
inline Result<std::unique_ptr<Executor>> create_layout_executor(
    std::shared_ptr<const LoadedModel> model, CudaExecutorOptions base, const TestLayout& layout,
    int replica = -1) {
  if (!layout.multi_gpu()) {
    if (layout.replicas > 1) {
      const int r = replica < 0 ? layout.replicas - 1 : replica;
      base.device = r % std::max(device_count(), 1);
    }
    return create_cuda_executor(std::move(model), base);
  }
  MultiGpuOptions multi;
  multi.devices = layout_devices(layout);
  multi.tensor_parallel = layout.tp;
  multi.pipeline_parallel = layout.pp;
  if (layout.micro_batches) multi.micro_batch_min_rows = 1;
  return create_multi_gpu_executor(std::move(model), base, multi);
}

}  // namespace llamaserve::testing
