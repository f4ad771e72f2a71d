// The reports of a run: report.json (every setting and step, machine-readable), report.md (a
// markdown table), and the gnuplot script of the picture (plot.h draws it).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "loadtest/config.h"
#include "loadtest/stats.h"

namespace llamaserve::loadtest {

struct RunReport {
  const LoadtestConfig* config = nullptr;
  std::string model;          // the model the requests named ("" = the server's default)
  std::string prompt_format;  // "tokens", "text" or "jsonl"
  std::string date_utc;       // ISO 8601 start of the run
  int64_t warmup_requests = 0, warmup_failed = 0;
  std::vector<StepStats> steps;
};

nlohmann::json report_json(const RunReport& report);
std::string report_markdown(const RunReport& report);
// The gnuplot script that draws latency percentiles and throughput against the load into
// `svg_path` and `png_path`; its data is inline, so the script alone redraws the picture.
std::string report_gnuplot(const RunReport& report, const std::string& svg_path,
                           const std::string& png_path);

// A one-line summary of a step for stderr.
std::string step_line(const StepStats& step);
// "c=64" or "rate=8/s".
std::string load_label(const StepLoad& load);

// Writes `text` to `path` through a temporary file renamed at the end.
Status write_text_file(const std::string& path, const std::string& text);

}  // namespace llamaserve::loadtest
