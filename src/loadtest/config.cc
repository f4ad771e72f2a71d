#include "loadtest/config.h"

#include <charconv>

namespace llamaserve::loadtest {
namespace {

Result<int32_t> parse_count(std::string_view text, const std::string& whole) {
  int32_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty()) {
    return make_error(StatusCode::kInvalidArgument,
                      "'{}' is not a length: expected N or MIN:MAX (token counts)", whole);
  }
  return value;
}

}  // namespace

Result<LengthRange> parse_length_range(const std::string& text, int32_t lowest) {
  const size_t colon = text.find(':');
  const std::string_view view(text);
  LS_ASSIGN_OR_RETURN(const int32_t min, parse_count(view.substr(0, colon), text));
  int32_t max = min;
  if (colon != std::string::npos) {
    LS_ASSIGN_OR_RETURN(max, parse_count(view.substr(colon + 1), text));
  }
  if (min < lowest || max < min) {
    return make_error(StatusCode::kInvalidArgument, "'{}': lengths must be >= {} and MIN <= MAX",
                      text, lowest);
  }
  return LengthRange{min, max};
}

Status finalize_config(LoadtestConfig& c) {
  if (c.concurrencies.empty() == c.rates_per_s.empty()) {
    return Status(StatusCode::kInvalidArgument,
                  "give the load as exactly one of -c/--concurrency or --rate");
  }
  for (int32_t n : c.concurrencies) {
    if (n < 1) return make_error(StatusCode::kInvalidArgument, "concurrency {} must be >= 1", n);
  }
  for (double rate : c.rates_per_s) {
    if (!(rate > 0)) {
      return make_error(StatusCode::kInvalidArgument, "rate {} must be > 0 requests/s", rate);
    }
  }
  if (c.requests < 0 || c.duration_s < 0 || c.warmup_requests < 0) {
    return Status(StatusCode::kInvalidArgument,
                  "--requests, --duration and --warmup-requests must be >= 0");
  }
  if (c.requests == 0 && c.duration_s == 0) c.duration_s = 60;
  if (!(c.request_timeout_s > 0)) {
    return Status(StatusCode::kInvalidArgument, "--request-timeout-s must be > 0");
  }
  if (c.shared_prefix_tokens < 0) {
    return Status(StatusCode::kInvalidArgument, "--shared-prefix-tokens must be >= 0");
  }
  if (c.prompts_file.empty() && c.shared_prefix_tokens >= c.prompt_tokens.min) {
    return make_error(StatusCode::kInvalidArgument,
                      "--shared-prefix-tokens {} must be less than the shortest prompt ({} "
                      "tokens): the prompt length counts the prefix",
                      c.shared_prefix_tokens, c.prompt_tokens.min);
  }
  if (c.prompt_format == PromptFormat::kTokens && c.endpoint == Endpoint::kChat) {
    return Status(StatusCode::kInvalidArgument,
                  "--prompt-format tokens needs --endpoint completions (chat takes text)");
  }
  if (c.slo_ttft_ms < 0 || c.slo_itl_ms < 0) {
    return Status(StatusCode::kInvalidArgument, "SLOs must be >= 0 ms");
  }
  if (c.max_connections < 1) {
    return Status(StatusCode::kInvalidArgument, "--max-connections must be >= 1");
  }
  if (c.out_dir.empty()) return Status(StatusCode::kInvalidArgument, "--out DIR is required");
  return Status::ok();
}

}  // namespace llamaserve::loadtest
