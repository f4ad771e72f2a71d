#include "backend/cuda/op_timer.h"

#include <fmt/format.h>

#include "backend/cuda/check.h"

namespace llamaserve::cuda {

OpTimer::~OpTimer() {
  if (cudaSetDevice(device_) != cudaSuccess) return;
  for (cudaEvent_t e : events_) LS_CUDA_LOG_ERROR(cudaEventDestroy(e));
}

Status OpTimer::begin(int32_t rows, cudaStream_t stream) {
  rows_ = rows;
  used_ = 0;
  labels_.clear();
  return mark(nullptr, stream);
}

Status OpTimer::mark(const char* label, cudaStream_t stream) {
  if (used_ == events_.size()) {
    cudaEvent_t e = nullptr;
    LS_CUDA_CHECK(cudaEventCreate(&e));
    events_.push_back(e);
  }
  LS_CUDA_CHECK(cudaEventRecord(events_[used_++], stream));
  if (label != nullptr) labels_.push_back(label);
  return Status::ok();
}

Status OpTimer::end() {
  if (used_ < 2) return Status::ok();
  Totals& t = by_rows_[rows_];
  if (!t.warmed_up) {
    // The first pass of a size loads kernels and lets cuBLAS choose: not counted.
    t.warmed_up = true;
    used_ = 0;
    return Status::ok();
  }
  ++t.passes;
  for (size_t i = 0; i + 1 < used_; ++i) {
    float ms = 0.0f;
    LS_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]));
    t.pass_ms += ms;
    const std::string label = labels_[i];
    auto it = t.label_ms.begin();
    while (it != t.label_ms.end() && it->first != label) ++it;
    if (it == t.label_ms.end()) {
      t.label_ms.emplace_back(label, ms);
    } else {
      it->second += ms;
    }
  }
  used_ = 0;
  return Status::ok();
}

std::string OpTimer::report() const {
  std::string out;
  for (const auto& [rows, t] : by_rows_) {
    const double pass_us = 1e3 * t.pass_ms / static_cast<double>(t.passes);
    if (t.passes == 0) continue;
    out += fmt::format("\n  cuda:{} passes of {} rows: {}, {:.1f} us each:", device_, rows,
                       t.passes, pass_us);
    for (const auto& [label, ms] : t.label_ms) {
      out += fmt::format(" {} {:.1f} us ({:.1f}%);", label,
                         1e3 * ms / static_cast<double>(t.passes), 100.0 * ms / t.pass_ms);
    }
  }
  return out;
}

}  // namespace llamaserve::cuda
