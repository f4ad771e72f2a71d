#include "loadtest/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <fmt/format.h>

namespace llamaserve::loadtest {
namespace {

double ms_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

}  // namespace

std::string outcome_key(Outcome outcome, int http_status) {
  switch (outcome) {
    case Outcome::kOk: return "ok";
    case Outcome::kHttpStatus: return fmt::format("http_{}", http_status);
    case Outcome::kConnectError: return "connect_error";
    case Outcome::kConnectionLost: return "connection_lost";
    case Outcome::kStreamError: return "stream_error";
    case Outcome::kTimeout: return "timeout";
  }
  return "unknown";
}

int64_t RequestRecord::output_tokens() const {
  return usage_completion_tokens >= 0 ? usage_completion_tokens : content_events;
}

std::vector<double> RequestRecord::itl_ms() const {
  std::vector<double> out;
  out.reserve(event_gaps_ms.size());
  // Tokens after the first event, spread evenly over the gaps that delivered them.
  double tokens_per_gap = 1.0;
  const int64_t tokens = output_tokens();
  if (!event_gaps_ms.empty() && tokens > content_events) {
    tokens_per_gap = static_cast<double>(tokens - 1) / static_cast<double>(event_gaps_ms.size());
  }
  for (float gap : event_gaps_ms) out.push_back(gap / tokens_per_gap);
  return out;
}

double percentile_sorted(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return std::numeric_limits<double>::quiet_NaN();
  const double n = static_cast<double>(sorted.size());
  const double rank = std::ceil(q / 100.0 * n);  // 1-based
  const size_t index = static_cast<size_t>(std::clamp(rank, 1.0, n)) - 1;
  return sorted[index];
}

Summary summarize(std::vector<double> values) {
  Summary s;
  s.count = static_cast<int64_t>(values.size());
  if (values.empty()) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    s.mean = s.p50 = s.p90 = s.p99 = s.max = nan;
    return s;
  }
  std::sort(values.begin(), values.end());
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  s.p50 = percentile_sorted(values, 50);
  s.p90 = percentile_sorted(values, 90);
  s.p99 = percentile_sorted(values, 99);
  s.max = values.back();
  return s;
}

bool meets_slo(const RequestRecord& record, const Slo& slo) {
  if (record.outcome != Outcome::kOk) return false;
  if (slo.ttft_ms > 0) {
    if (record.content_events == 0) return false;  // no first token: no TTFT to meet
    if (ms_between(record.sent, record.first_content) > slo.ttft_ms) return false;
  }
  if (slo.itl_ms > 0) {
    std::vector<double> itl = record.itl_ms();
    std::sort(itl.begin(), itl.end());
    if (!itl.empty() && percentile_sorted(itl, 99) > slo.itl_ms) return false;
  }
  return true;
}

StepStats compute_stats(const StepResult& step, const Slo& slo) {
  StepStats s;
  s.load = step.load;
  s.elapsed_s = step.elapsed_s;
  s.max_send_lag_ms = step.max_send_lag_ms;
  s.waited_for_connection = step.waited_for_connection;
  std::vector<double> ttft, itl, tpot, e2e, tokens_per_request;
  int64_t good_tokens = 0;
  for (const RequestRecord& r : step.records) {
    ++s.requests;
    ++s.outcomes[outcome_key(r.outcome, r.http_status)];
    if (r.outcome != Outcome::kOk) {
      ++s.failed;
      continue;
    }
    ++s.ok;
    const int64_t tokens = r.output_tokens();
    s.output_tokens += tokens;
    s.prompt_tokens += r.usage_prompt_tokens >= 0 ? r.usage_prompt_tokens : r.planned_prompt_tokens;
    tokens_per_request.push_back(static_cast<double>(tokens));
    e2e.push_back(ms_between(r.sent, r.end));
    if (r.content_events > 0) ttft.push_back(ms_between(r.sent, r.first_content));
    if (tokens > 1 && r.content_events > 1) {
      tpot.push_back(ms_between(r.first_content, r.last_content) / static_cast<double>(tokens - 1));
    }
    const std::vector<double> samples = r.itl_ms();
    itl.insert(itl.end(), samples.begin(), samples.end());
    if (slo.any() && meets_slo(r, slo)) {
      ++s.slo_met;
      good_tokens += tokens;
    }
  }
  if (s.elapsed_s > 0) {
    s.requests_per_s = static_cast<double>(s.ok) / s.elapsed_s;
    s.output_tokens_per_s = static_cast<double>(s.output_tokens) / s.elapsed_s;
    if (slo.any()) {
      s.goodput_requests_per_s = static_cast<double>(s.slo_met) / s.elapsed_s;
      s.goodput_tokens_per_s = static_cast<double>(good_tokens) / s.elapsed_s;
    }
  }
  s.ttft_ms = summarize(std::move(ttft));
  s.itl_ms = summarize(std::move(itl));
  s.tpot_ms = summarize(std::move(tpot));
  s.e2e_ms = summarize(std::move(e2e));
  s.output_tokens_per_request = summarize(std::move(tokens_per_request));
  return s;
}

}  // namespace llamaserve::loadtest
