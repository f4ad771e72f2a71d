// Progress of a long job (convert, quantize, synth, model loading) reported on a stream:
// on a terminal a bar redrawn in place at most ten times a second, otherwise plain lines at
// every tenth of the work (or a few info log lines), so that logs of a batch job stay short and
// readable.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>

#include "core/status.h"

namespace llamaserve {

enum class ProgressStyle {
  kAuto,    // kBar when the stream is a terminal, kLines otherwise
  kBar,     // "\r" redraws of one line
  kLines,   // one line at each 10% step and one at the end
  kLog,     // info log lines (spdlog): one at the end, and one at each quarter of jobs that
            // have run for more than a second by then (quick jobs log a single line)
  kSilent,  // nothing
};

// "auto", "bar", "lines" or "none" (a --progress option).
Result<ProgressStyle> parse_progress_style(std::string_view name);

enum class ProgressUnit { kCount, kBytes };

class Progress {
 public:
  // `total` work units of `unit`; `out` must outlive the Progress.
  Progress(std::string label, uint64_t total, ProgressUnit unit = ProgressUnit::kCount,
           ProgressStyle style = ProgressStyle::kAuto, FILE* out = stderr);
  // Without finish() (the job failed) only ends the bar's line; no "done" is printed.
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Records n more units done. Thread-safe; redraws are throttled, so calling it per row of
  // a matrix from many threads is fine. `detail` (e.g. the tensor being written) is shown
  // by the bar and by the lines.
  void add(uint64_t n_units, std::string_view detail = {});
  // Same, for callers that count the units done so far (model loading reports byte totals).
  // A value below the current one is ignored.
  void update(uint64_t done_units, std::string_view detail = {});
  void set_detail(std::string_view detail);

  // Prints the final state ("done in 12.3 s") once; later calls do nothing.
  void finish();

  uint64_t done_units() const;
  ProgressStyle style() const { return style_; }

  // "1.50 GiB", "12.0 MiB", "512 B"; counts print as plain numbers.
  static std::string format_amount(uint64_t value, ProgressUnit unit);

 private:
  void advance_locked(uint64_t done_units, std::string_view detail);
  std::string render_locked(bool final) const;

  std::string label_;
  uint64_t total_;
  ProgressUnit unit_;
  ProgressStyle style_;
  FILE* out_;
  std::chrono::steady_clock::time_point start_;

  mutable std::mutex mutex_;
  uint64_t done_ = 0;
  std::string detail_;
  std::chrono::steady_clock::time_point last_draw_;
  int last_step_ = 0;  // lines and log styles: the last 10% (25%) step passed
  bool finished_ = false;
  bool drawn_ = false;
};

}  // namespace llamaserve
