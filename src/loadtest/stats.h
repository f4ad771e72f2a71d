// What each request measured (client-side steady-clock times) and the figures of a step:
// counts by outcome, throughput, latency percentiles and goodput under SLOs.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace llamaserve::loadtest {

using Clock = std::chrono::steady_clock;

enum class Outcome {
  kOk,              // HTTP 200, the stream read to its end without an error event
  kHttpStatus,      // an answer other than 200 (http_status says which)
  kConnectError,    // no connection (refused, unreachable)
  kConnectionLost,  // the connection failed or closed before the answer ended
  kStreamError,     // HTTP 200, then an error event in the stream (or unreadable events)
  kTimeout,         // no complete answer within --request-timeout-s
};

// "ok", "http_429", "connect_error", "connection_lost", "stream_error", "timeout".
std::string outcome_key(Outcome outcome, int http_status);

struct RequestRecord {
  Outcome outcome = Outcome::kOk;
  int http_status = 0;     // 0 when no answer head was read
  std::string error;       // what went wrong (first bytes of an error body, a socket error)
  Clock::time_point sent;  // the request was started (before connecting, if it had to)
  Clock::time_point first_content;  // the first event that carried generated text
  Clock::time_point last_content;
  Clock::time_point end;  // the last byte of the answer (or the failure)
  int64_t content_events = 0;
  // Gaps between consecutive content events, in ms (content_events - 1 of them).
  std::vector<float> event_gaps_ms;
  int64_t usage_completion_tokens = -1;  // the usage chunk's counts, -1 when none came
  int64_t usage_prompt_tokens = -1;
  int64_t planned_prompt_tokens = 0;  // what the generator aimed at (0: unknown, JSONL text)
  std::string body;                   // kept only when asked for (probes)

  // Output tokens: the usage count when the server sent one, else one per content event.
  int64_t output_tokens() const;
  // Inter-token latency samples in ms (see docs/loadtest.md): the event gaps, each divided by
  // the mean tokens per event after the first when the usage count exceeds the event count.
  std::vector<double> itl_ms() const;
};

// Nearest-rank percentile (q in [0, 100]) of sorted values: the smallest value with at least
// q% of the values at or below it. NaN for no values.
double percentile_sorted(const std::vector<double>& sorted, double q);

struct Summary {
  int64_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;  // NaN when count == 0
};
Summary summarize(std::vector<double> values);

struct Slo {
  double ttft_ms = 0;  // 0 = not set
  double itl_ms = 0;   // on the request's p99 ITL
  bool any() const { return ttft_ms > 0 || itl_ms > 0; }
};

// Whether an ok request met every SLO that is set.
bool meets_slo(const RequestRecord& record, const Slo& slo);

struct StepLoad {
  bool closed_loop = true;  // concurrency, else rate
  double value = 0;         // streams, or requests per second
};

// What the runner hands back for one step.
struct StepResult {
  StepLoad load;
  double elapsed_s = 0;  // first request started -> last request ended
  std::vector<RequestRecord> records;
  double max_send_lag_ms = 0;         // open loop: how late a send was behind its Poisson time
  int64_t waited_for_connection = 0;  // open loop: arrivals that found --max-connections in use
};

struct StepStats {
  StepLoad load;
  double elapsed_s = 0;
  int64_t requests = 0, ok = 0, failed = 0;
  std::map<std::string, int64_t> outcomes;  // outcome_key -> count
  int64_t output_tokens = 0;                // of ok requests
  int64_t prompt_tokens = 0;                // of ok requests (usage, else planned)
  double requests_per_s = 0, output_tokens_per_s = 0;
  Summary ttft_ms, itl_ms, tpot_ms, e2e_ms, output_tokens_per_request;
  std::optional<double> goodput_requests_per_s, goodput_tokens_per_s;
  int64_t slo_met = 0;
  double max_send_lag_ms = 0;
  int64_t waited_for_connection = 0;
};

StepStats compute_stats(const StepResult& step, const Slo& slo);

}  // namespace llamaserve::loadtest
