// Prometheus metrics of the server, kept in a prometheus-cpp Registry and rendered with its
// TextSerializer for GET /metrics. Request-level values are recorded as they happen; engine
// gauges and totals (summed over the replicas, and per replica with a replica="i" label) and
// GPU readings are sampled at scrape time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "engine/request.h"
#include "server/gpu_metrics.h"
#include "service/model_registry.h"

namespace llamaserve::server {

// What a scrape samples.
struct MetricsSnapshot {
  EngineStats engine;                 // summed over the replicas
  std::vector<EngineStats> replicas;  // one per replica; empty before the model is loaded
  std::vector<GpuSample> gpus;        // empty without NVML
  std::vector<ModelStatus> models;    // every configured model
  // Device memory the executors' pools hold (all models, all versions); none on the CPU.
  std::optional<uint64_t> device_pool_bytes;
};

class ServerMetrics {
 public:
  ServerMetrics();
  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  // One per finished HTTP request. `endpoint` is a route pattern (bounded cardinality),
  // `status` the HTTP status sent, or 499 when the client went away first; `model` the
  // served model it used ("" for requests that used none). Generation series carry the model.
  void record_request(std::string_view endpoint, int status, std::string_view model);
  void record_finish_reason(std::string_view reason, std::string_view model);
  void observe_time_to_first_token(std::string_view model, double seconds);
  void observe_inter_token_latency(std::string_view model, double seconds);
  void observe_request_duration(std::string_view model, double seconds);
  void set_ready(bool ready);
  void add_http_in_flight(int delta);

  // Samples `snapshot` into the engine and GPU series, then serializes everything. GPU series
  // exist only for readings the snapshot has.
  std::string render(const MetricsSnapshot& snapshot);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Counter>& finish_reasons_;
  prometheus::Family<prometheus::Histogram>& time_to_first_token_s_;
  prometheus::Family<prometheus::Histogram>& inter_token_latency_s_;
  prometheus::Family<prometheus::Histogram>& request_duration_s_;
  prometheus::Gauge& ready_;
  prometheus::Family<prometheus::Gauge>& device_pool_bytes_;
  prometheus::Gauge& http_in_flight_;
  prometheus::Gauge& queue_length_;
  prometheus::Gauge& running_sequences_;
  prometheus::Gauge& kv_blocks_used_;
  prometheus::Gauge& kv_blocks_free_;
  prometheus::Counter& prompt_tokens_;
  prometheus::Counter& generated_tokens_;
  prometheus::Counter& preemptions_;
  prometheus::Counter& engine_steps_;
  prometheus::Counter& device_sampled_steps_;
  prometheus::Counter& step_seconds_;
  prometheus::Counter& forward_seconds_;
  // The steps by kind (label kind="decode|mixed|prompt") and duration (EngineStats).
  prometheus::Family<prometheus::Histogram>& step_duration_s_;
  prometheus::Gauge& kv_blocks_cached_;
  prometheus::Counter& prefix_cache_queries_;
  prometheus::Counter& prefix_cache_query_tokens_;
  prometheus::Counter& prefix_cache_hit_tokens_;
  prometheus::Counter& prefix_cache_evictions_;
  // Per replica, label replica="i".
  prometheus::Family<prometheus::Gauge>& replica_queue_length_;
  prometheus::Family<prometheus::Gauge>& replica_running_sequences_;
  prometheus::Family<prometheus::Gauge>& replica_kv_blocks_used_;
  prometheus::Family<prometheus::Gauge>& replica_kv_blocks_total_;
  prometheus::Family<prometheus::Counter>& replica_generated_tokens_;

  // Per model, label model="name".
  prometheus::Family<prometheus::Gauge>& model_state_;
  prometheus::Family<prometheus::Gauge>& model_in_flight_;
  prometheus::Family<prometheus::Counter>& model_loads_;
  prometheus::Family<prometheus::Counter>& model_load_failures_;
  prometheus::Family<prometheus::Histogram>& model_load_seconds_;

  void sample_replicas(const std::vector<EngineStats>& replicas);  // sample_mutex_ held
  void sample_models(const std::vector<ModelStatus>& models);      // sample_mutex_ held
  void sample_gpus(const std::vector<GpuSample>& gpus);            // sample_mutex_ held
  void sample_step_durations(const EngineStats& stats);            // sample_mutex_ held

  // Engine totals are cumulative; the counters advance by the difference since the last
  // scrape (Prometheus counters only go up).
  std::mutex sample_mutex_;
  EngineStats last_sampled_;
  std::vector<EngineStats> last_sampled_replicas_;
  std::map<std::string, ModelStatus> last_sampled_models_;
  // Per device, label device="N"; registered at the first reading, so that a server without
  // NVML has no GPU series at all (not even their HELP lines).
  struct GpuFamilies {
    prometheus::Family<prometheus::Gauge>* memory_used_bytes = nullptr;
    prometheus::Family<prometheus::Gauge>* memory_total_bytes = nullptr;
    prometheus::Family<prometheus::Gauge>* utilization_percent = nullptr;
    prometheus::Family<prometheus::Gauge>* temperature_celsius = nullptr;
  } gpu_;
};

}  // namespace llamaserve::server
