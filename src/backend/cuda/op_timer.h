// Per-operation GPU times of eager passes, from CUDA events recorded between the operations of
// every layer (KernelTuning::op_times turns it on in the CUDA executor; it then runs without
// CUDA graphs). Passes are grouped by their row count, so that a prompt's 512-row passes and
// the one-row decode steps of the same run are reported apart; the first pass of each size
// (kernel loading, cuBLAS's choices) is left out. Events add a little time of
// their own to each operation: the shares matter, not the last microsecond.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/status.h"

namespace llamaserve::cuda {

class OpTimer {
 public:
  explicit OpTimer(int device) : device_(device) {}
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

  // Starts a pass of `rows` rows on `stream`.
  Status begin(int32_t rows, cudaStream_t stream);
  // The time since the previous mark (or begin) counts towards `label`, a string literal.
  Status mark(const char* label, cudaStream_t stream);
  // After the pass's work has completed (the caller synchronized its stream): adds the
  // intervals up.
  Status end();

  // One line per row count: passes, mean microseconds per pass and per label (share of the
  // pass), labels in the order of their first mark.
  std::string report() const;

 private:
  struct Totals {
    bool warmed_up = false;  // the first pass of each size is not counted
    int64_t passes = 0;
    double pass_ms = 0.0;
    std::vector<std::pair<std::string, double>> label_ms;  // first-seen order
  };

  int device_;
  std::vector<cudaEvent_t> events_;  // reused from pass to pass
  std::vector<const char*> labels_;  // labels_[i]: the interval ending at events_[i + 1]
  size_t used_ = 0;
  int32_t rows_ = 0;
  std::map<int32_t, Totals> by_rows_;
};

}  // namespace llamaserve::cuda
