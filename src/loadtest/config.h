// The settings of one `llamaserve loadtest` run: one plain struct, filled by the command's
// flags (cli/cmd_loadtest.cc) and read by everything in this folder.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace llamaserve::loadtest {

// A length in tokens: fixed (min == max) or drawn uniformly from [min, max].
struct LengthRange {
  int32_t min = 128;
  int32_t max = 128;
  bool fixed() const { return min == max; }
};

// "128" or "64:256"; both ends >= `lowest`.
Result<LengthRange> parse_length_range(const std::string& text, int32_t lowest = 1);

enum class Endpoint { kCompletions, kChat };
// How fixed-length prompts are written: token-id arrays (exact; needs POST /tokenize and the
// completions endpoint), text of words (about one token a word), or chosen at start.
enum class PromptFormat { kAuto, kTokens, kText };

struct LoadtestConfig {
  std::string url = "http://127.0.0.1:8080";  // server base URL (http only)
  std::string api_key;                        // sent as "Authorization: Bearer KEY"
  std::string model;                          // "model" of each request; "" = /v1/models' first
  Endpoint endpoint = Endpoint::kCompletions;

  // The sweep: one step per element of exactly one of the two lists.
  std::vector<int32_t> concurrencies;  // closed loop: streams sending back to back
  std::vector<double> rates_per_s;     // open loop: Poisson arrivals, requests per second

  // Per step: stop issuing after this many counted requests or this many seconds, whichever
  // comes first (0 = not a limit; both 0 = duration_s 60). Requests in flight then finish.
  int64_t requests = 0;
  double duration_s = 0;
  int64_t warmup_requests = 2;     // before the first step, not counted
  double request_timeout_s = 600;  // from send to the last byte; past it: failed, "timeout"

  LengthRange prompt_tokens{128, 128};
  LengthRange output_tokens{128, 128};
  std::string prompts_file;          // JSONL prompts instead of generated ones
  int32_t shared_prefix_tokens = 0;  // the same prefix at the start of every prompt
  PromptFormat prompt_format = PromptFormat::kAuto;
  bool ignore_eos = true;  // with max_tokens: every request generates its full output length
  // "temperature" of every request; unset: not sent (the server's default, 1 for OpenAI APIs).
  std::optional<double> temperature;
  uint64_t seed = 1;

  // Goodput SLOs in milliseconds (0 = not set): TTFT, and the request's p99 inter-token gap.
  double slo_ttft_ms = 0;
  double slo_itl_ms = 0;

  std::string out_dir;              // report.json, report.md, report.gp, report.svg/.png
  std::string gnuplot = "gnuplot";  // the program that draws the picture
  std::string progress = "auto";    // auto | bar | lines | none (core/progress.h)
  int32_t max_connections = 4096;   // open loop: arrivals wait for a connection past this
  std::string command_line;         // recorded in report.json
};

// Checks the combination of settings; fills the default stop condition.
Status finalize_config(LoadtestConfig& config);

}  // namespace llamaserve::loadtest
