// Prometheus metrics of the server, kept in a prometheus-cpp Registry and rendered with its
// TextSerializer for GET /metrics. Request-level values are recorded as they happen; engine
// gauges and totals are sampled from EngineStats at scrape time.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "engine/request.h"

namespace llamaserve::server {

class ServerMetrics {
 public:
  ServerMetrics();
  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  // One per finished HTTP request. `endpoint` is a route pattern (bounded cardinality),
  // `status` the HTTP status sent, or 499 when the client went away first.
  void record_request(std::string_view endpoint, int status);
  void record_finish_reason(std::string_view reason);
  void observe_time_to_first_token(double seconds);
  void observe_inter_token_latency(double seconds);
  void observe_request_duration(double seconds);
  void set_ready(bool ready);
  void add_http_in_flight(int delta);

  // Samples `stats` into the engine gauges and counters, then serializes everything.
  std::string render(const EngineStats& stats);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Counter>& finish_reasons_;
  prometheus::Histogram& time_to_first_token_s_;
  prometheus::Histogram& inter_token_latency_s_;
  prometheus::Histogram& request_duration_s_;
  prometheus::Gauge& ready_;
  prometheus::Gauge& http_in_flight_;
  prometheus::Gauge& queue_length_;
  prometheus::Gauge& running_sequences_;
  prometheus::Gauge& kv_blocks_used_;
  prometheus::Gauge& kv_blocks_free_;
  prometheus::Counter& prompt_tokens_;
  prometheus::Counter& generated_tokens_;
  prometheus::Counter& preemptions_;
  prometheus::Counter& engine_steps_;

  // Engine totals are cumulative; the counters advance by the difference since the last
  // scrape (Prometheus counters only go up).
  std::mutex sample_mutex_;
  EngineStats last_sampled_;
};

}  // namespace llamaserve::server
