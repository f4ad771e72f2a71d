// What the load is made of: request lengths, Poisson arrival times, prompts (generated or read
// from a JSONL file) and the JSON body of every request.
#pragma once

#include <cstdint>
#include <istream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "loadtest/config.h"

namespace llamaserve::loadtest {

// A length drawn uniformly from [range.min, range.max].
int32_t draw_length(const LengthRange& range, std::mt19937_64& rng);

// Open-loop arrivals: exponential gaps of mean 1 / rate, so the count in any interval is
// Poisson. next_s() is the time of the next arrival, in seconds from the start.
class PoissonSchedule {
 public:
  // PRECONDITION: rate_per_s > 0.
  PoissonSchedule(double rate_per_s, uint64_t seed);
  double next_s();

 private:
  std::mt19937_64 rng_;
  std::exponential_distribution<double> gap_s_;
  double now_s_ = 0;
};

// One line of a --prompts file: {"prompt": "..."} or {"messages": [...]}, and optionally
// "max_tokens".
struct PromptLine {
  std::string prompt;       // "" when the line has messages
  nlohmann::json messages;  // null when the line has a prompt
  int32_t max_tokens = 0;   // 0 = the --output-tokens length
};

// Every non-blank line must be one such object; the error names the line and what is wrong.
Result<std::vector<PromptLine>> read_prompt_lines(std::istream& in, const std::string& name);
Result<std::vector<PromptLine>> read_prompt_file(const std::string& path);

struct PlannedRequest {
  std::string target;  // "/v1/completions" or "/v1/chat/completions"
  std::string body;
  int64_t planned_prompt_tokens = 0;  // exact with token prompts; 0 when not known
  int32_t max_tokens = 0;
};

// Builds request `index` of the run. Lengths and prompt text come from --seed (the same for
// every index and run); each prompt starts with a tag made of the index and a per-run salt,
// so no two prompts of a run, nor of two runs, share a prefix unless --shared-prefix-tokens
// puts the same prefix in front of every tag.
class RequestGenerator {
 public:
  // `token_pool`: token ids to write token prompts from (empty: text prompts). `model`: the
  // "model" field ("" leaves it out). `run_salt` makes this run's prompts its own.
  static Result<RequestGenerator> create(const LoadtestConfig& config,
                                         std::vector<int32_t> token_pool, std::string model,
                                         uint64_t run_salt);

  PlannedRequest make(int64_t index) const;
  bool token_prompts() const { return !token_pool_.empty(); }

  // Words of generated text prompts; each is one token in common BPE vocabularies (with its
  // leading space), so a prompt of N words is about N tokens.
  static const std::vector<std::string>& words();

 private:
  RequestGenerator() = default;
  nlohmann::json token_prompt(int64_t index, int32_t length, std::mt19937_64& rng) const;
  std::string text_prompt(int64_t index, int32_t length, std::mt19937_64& rng) const;
  std::string text_tag(int64_t index) const;

  LoadtestConfig config_;
  std::vector<int32_t> token_pool_;
  std::string model_;
  uint64_t run_salt_ = 0;
  std::vector<int32_t> shared_prefix_tokens_;
  std::string shared_prefix_text_;
  std::vector<PromptLine> lines_;
};

}  // namespace llamaserve::loadtest
