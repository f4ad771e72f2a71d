#include "server/metrics.h"

#include <algorithm>
#include <array>
#include <optional>
#include <vector>

#include <prometheus/text_serializer.h>

#include "core/build_info.h"
#include "executor/executor_factory.h"

namespace llamaserve::server {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Histogram;

prometheus::Family<Histogram>& add_histogram_family(prometheus::Registry& registry,
                                                    const std::string& name,
                                                    const std::string& help) {
  return BuildHistogram().Name(name).Help(help).Register(registry);
}

const Histogram::BucketBoundaries kTimeToFirstTokenBuckets = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                              1,    2.5,   5,    10,  30,   60};
const Histogram::BucketBoundaries kInterTokenBuckets = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.05,
                                                        0.1,   0.25,   0.5,   1,    2.5};
const Histogram::BucketBoundaries kRequestDurationBuckets = {0.05, 0.1, 0.25, 0.5, 1,   2.5,
                                                             5,    10,  30,   60,  120, 300};
const Histogram::BucketBoundaries kStepBuckets(kStepSecondsBounds.begin(),
                                               kStepSecondsBounds.end());
constexpr std::array<const char*, kStepKinds> kStepKindNames = {"decode", "mixed", "prompt"};

prometheus::Gauge& add_gauge(prometheus::Registry& registry, const std::string& name,
                             const std::string& help) {
  return BuildGauge().Name(name).Help(help).Register(registry).Add({});
}

prometheus::Counter& add_counter(prometheus::Registry& registry, const std::string& name,
                                 const std::string& help) {
  return BuildCounter().Name(name).Help(help).Register(registry).Add({});
}

prometheus::Family<prometheus::Gauge>& add_gauge_family(prometheus::Registry& registry,
                                                        const std::string& name,
                                                        const std::string& help) {
  return BuildGauge().Name(name).Help(help).Register(registry);
}

template <typename T>
void advance(prometheus::Counter& counter, T now, T before) {
  if (now > before) counter.Increment(static_cast<double>(now - before));
}

// Sets the series of `labels` to `value`, or removes it when there is no value.
template <typename T>
void set_or_remove(prometheus::Family<prometheus::Gauge>& family, const prometheus::Labels& labels,
                   const std::optional<T>& value) {
  if (value) {
    family.Add(labels).Set(static_cast<double>(*value));
  } else if (family.Has(labels)) {
    family.Remove(&family.Add(labels));
  }
}

}  // namespace

ServerMetrics::ServerMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      requests_(BuildCounter()
                    .Name("llamaserve_requests_total")
                    .Help("HTTP requests by endpoint and status (499: client closed first)")
                    .Register(*registry_)),
      finish_reasons_(BuildCounter()
                          .Name("llamaserve_generations_finished_total")
                          .Help("Generations by finish reason")
                          .Register(*registry_)),
      time_to_first_token_s_(add_histogram_family(*registry_,
                                                  "llamaserve_time_to_first_token_seconds",
                                                  "From request arrival to the first generated "
                                                  "token, per model")),
      inter_token_latency_s_(add_histogram_family(
          *registry_, "llamaserve_inter_token_latency_seconds",
          "Time between consecutive generated tokens of one request, per model")),
      request_duration_s_(add_histogram_family(*registry_, "llamaserve_request_duration_seconds",
                                               "End-to-end duration of generation requests, per "
                                               "model")),
      ready_(add_gauge(*registry_, "llamaserve_ready", "1 when /ready answers 200")),
      device_pool_bytes_(add_gauge_family(*registry_, "llamaserve_gpu_pool_bytes",
                                          "Device memory held by the executors' pools of every "
                                          "loaded model version")),
      http_in_flight_(add_gauge(*registry_, "llamaserve_http_requests_in_flight",
                                "Generation requests being served")),
      queue_length_(
          add_gauge(*registry_, "llamaserve_queue_length", "Requests waiting for the engine")),
      running_sequences_(add_gauge(*registry_, "llamaserve_running_sequences",
                                   "Sequences the engine is generating")),
      kv_blocks_used_(add_gauge(*registry_, "llamaserve_kv_blocks_used", "KV cache blocks in use")),
      kv_blocks_free_(add_gauge(*registry_, "llamaserve_kv_blocks_free", "KV cache blocks free")),
      prompt_tokens_(add_counter(*registry_, "llamaserve_prompt_tokens_total",
                                 "Prompt tokens processed by the engine")),
      generated_tokens_(add_counter(*registry_, "llamaserve_generated_tokens_total",
                                    "Tokens generated by the engine")),
      preemptions_(add_counter(*registry_, "llamaserve_preemptions_total",
                               "Sequences preempted because KV blocks ran out")),
      engine_steps_(
          add_counter(*registry_, "llamaserve_engine_steps_total", "Engine scheduler steps")),
      device_sampled_steps_(add_counter(*registry_, "llamaserve_device_sampled_steps_total",
                                        "Engine steps whose tokens were drawn on the GPU")),
      step_seconds_(add_counter(*registry_, "llamaserve_engine_step_seconds_total",
                                "Wall time of the engine's generation steps")),
      forward_seconds_(add_counter(*registry_, "llamaserve_engine_forward_seconds_total",
                                   "Of that, the forward passes (the executor's part)")),
      step_duration_s_(add_histogram_family(*registry_, "llamaserve_engine_step_duration_seconds",
                                            "Wall time of the engine's steps by what they compute "
                                            "(decode: decodes only, mixed: decodes beside prompt "
                                            "chunks, prompt: prompt chunks only)")),
      kv_blocks_cached_(add_gauge(*registry_, "llamaserve_kv_blocks_cached",
                                  "Free KV cache blocks that still hold a reusable prompt prefix")),
      prefix_cache_queries_(add_counter(*registry_, "llamaserve_prefix_cache_queries_total",
                                        "Sequences admitted with a prefix-cache lookup")),
      prefix_cache_query_tokens_(add_counter(*registry_,
                                             "llamaserve_prefix_cache_query_tokens_total",
                                             "Tokens of the sequences that looked up the prefix "
                                             "cache")),
      prefix_cache_hit_tokens_(add_counter(*registry_, "llamaserve_prefix_cache_hit_tokens_total",
                                           "Prompt tokens found in the prefix cache and not "
                                           "computed again")),
      prefix_cache_evictions_(add_counter(*registry_, "llamaserve_prefix_cache_evictions_total",
                                          "Cached KV blocks overwritten to make room")),
      replica_queue_length_(add_gauge_family(*registry_, "llamaserve_replica_queue_length",
                                             "Requests waiting for one replica's engine")),
      replica_running_sequences_(add_gauge_family(*registry_,
                                                  "llamaserve_replica_running_sequences",
                                                  "Sequences one replica is generating")),
      replica_kv_blocks_used_(add_gauge_family(*registry_, "llamaserve_replica_kv_blocks_used",
                                               "KV cache blocks in use on one replica")),
      replica_kv_blocks_total_(add_gauge_family(*registry_, "llamaserve_replica_kv_blocks_total",
                                                "KV cache blocks of one replica")),
      replica_generated_tokens_(BuildCounter()
                                    .Name("llamaserve_replica_generated_tokens_total")
                                    .Help("Tokens generated by one replica")
                                    .Register(*registry_)),
      model_state_(add_gauge_family(*registry_, "llamaserve_model_state",
                                    "1 for the state each model is in (label state)")),
      model_in_flight_(add_gauge_family(*registry_, "llamaserve_model_requests_in_flight",
                                        "Requests holding each model's current version")),
      model_loads_(BuildCounter()
                       .Name("llamaserve_model_loads_total")
                       .Help("Successful loads of each model (reloads included)")
                       .Register(*registry_)),
      model_load_failures_(BuildCounter()
                               .Name("llamaserve_model_load_failures_total")
                               .Help("Failed loads and reloads of each model")
                               .Register(*registry_)),
      model_load_seconds_(prometheus::BuildHistogram()
                              .Name("llamaserve_model_load_seconds")
                              .Help("How long each model's loads took, warm-up included")
                              .Register(*registry_)) {
  const BuildInfo& build = build_info();
  add_gauge_family(*registry_, "llamaserve_build_info",
                   "1, with the version and commit of the running binary and whether it was "
                   "built with CUDA")
      .Add({{"version", std::string(build.version)},
            {"commit", std::string(build.commit)},
            {"cuda", cuda_build() ? "true" : "false"}})
      .Set(1);
  // Every kind's series from the start, zero until its first step.
  for (const char* kind : kStepKindNames) step_duration_s_.Add({{"kind", kind}}, kStepBuckets);
}

void ServerMetrics::sample_models(const std::vector<ModelStatus>& models) {
  static const prometheus::Histogram::BucketBoundaries kLoadBuckets = {0.5, 1,  2.5, 5,   10,
                                                                       30,  60, 120, 300, 600};
  for (const ModelStatus& model : models) {
    for (ModelState state :
         {ModelState::kUnloaded, ModelState::kLoading, ModelState::kLoaded, ModelState::kFailed}) {
      model_state_.Add({{"model", model.name}, {"state", model_state_name(state)}})
          .Set(model.state == state ? 1 : 0);
    }
    model_in_flight_.Add({{"model", model.name}}).Set(model.in_flight);
    const ModelStatus& last = last_sampled_models_[model.name];
    prometheus::Counter& loads = model_loads_.Add({{"model", model.name}});
    advance(loads, model.loads, last.loads);
    advance(model_load_failures_.Add({{"model", model.name}}), model.load_failures,
            last.load_failures);
    auto& seconds = model_load_seconds_.Add({{"model", model.name}}, kLoadBuckets);
    if (model.loads > last.loads) seconds.Observe(model.last_load_seconds);
    last_sampled_models_[model.name] = model;
  }
}

void ServerMetrics::record_request(std::string_view endpoint, int status, std::string_view model) {
  prometheus::Labels labels = {{"endpoint", std::string(endpoint)},
                               {"status", std::to_string(status)}};
  if (!model.empty()) labels.emplace("model", std::string(model));
  requests_.Add(labels).Increment();
}

void ServerMetrics::record_finish_reason(std::string_view reason, std::string_view model) {
  finish_reasons_.Add({{"reason", std::string(reason)}, {"model", std::string(model)}}).Increment();
}

void ServerMetrics::observe_time_to_first_token(std::string_view model, double seconds) {
  time_to_first_token_s_.Add({{"model", std::string(model)}}, kTimeToFirstTokenBuckets)
      .Observe(seconds);
}
void ServerMetrics::observe_inter_token_latency(std::string_view model, double seconds) {
  inter_token_latency_s_.Add({{"model", std::string(model)}}, kInterTokenBuckets).Observe(seconds);
}
void ServerMetrics::observe_request_duration(std::string_view model, double seconds) {
  request_duration_s_.Add({{"model", std::string(model)}}, kRequestDurationBuckets)
      .Observe(seconds);
}
void ServerMetrics::set_ready(bool ready) { ready_.Set(ready ? 1 : 0); }
void ServerMetrics::add_http_in_flight(int delta) {
  if (delta >= 0) {
    http_in_flight_.Increment(delta);
  } else {
    http_in_flight_.Decrement(-delta);
  }
}

std::string ServerMetrics::render(const MetricsSnapshot& snapshot) {
  {
    std::lock_guard lock(sample_mutex_);
    const EngineStats& stats = snapshot.engine;
    queue_length_.Set(stats.waiting);
    running_sequences_.Set(stats.running);
    kv_blocks_used_.Set(stats.kv_blocks_total - stats.kv_blocks_free);
    kv_blocks_free_.Set(stats.kv_blocks_free);
    advance(prompt_tokens_, stats.prompt_tokens_total, last_sampled_.prompt_tokens_total);
    advance(generated_tokens_, stats.generated_tokens_total, last_sampled_.generated_tokens_total);
    advance(preemptions_, stats.preemptions_total, last_sampled_.preemptions_total);
    advance(engine_steps_, stats.steps_total, last_sampled_.steps_total);
    advance(device_sampled_steps_, stats.device_sampled_steps_total,
            last_sampled_.device_sampled_steps_total);
    advance(step_seconds_, stats.step_seconds_total, last_sampled_.step_seconds_total);
    advance(forward_seconds_, stats.forward_seconds_total, last_sampled_.forward_seconds_total);
    sample_step_durations(stats);
    kv_blocks_cached_.Set(stats.kv_blocks_cached);
    advance(prefix_cache_queries_, stats.prefix_cache_queries_total,
            last_sampled_.prefix_cache_queries_total);
    advance(prefix_cache_query_tokens_, stats.prefix_cache_query_tokens_total,
            last_sampled_.prefix_cache_query_tokens_total);
    advance(prefix_cache_hit_tokens_, stats.prefix_cache_hit_tokens_total,
            last_sampled_.prefix_cache_hit_tokens_total);
    advance(prefix_cache_evictions_, stats.prefix_cache_evictions_total,
            last_sampled_.prefix_cache_evictions_total);
    last_sampled_ = stats;
    sample_replicas(snapshot.replicas);
    sample_gpus(snapshot.gpus);
    sample_models(snapshot.models);
    set_or_remove(device_pool_bytes_, {}, snapshot.device_pool_bytes);
  }
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

void ServerMetrics::sample_step_durations(const EngineStats& stats) {
  for (int kind = 0; kind < kStepKinds; ++kind) {
    Histogram& histogram = step_duration_s_.Add({{"kind", kStepKindNames[kind]}}, kStepBuckets);
    const StepDurations& now = stats.step_durations[kind];
    const StepDurations& before = last_sampled_.step_durations[kind];
    if (now.count <= before.count) continue;  // nothing new, or an engine left the sum
    std::vector<double> increments(now.buckets.size());
    for (size_t i = 0; i < increments.size(); ++i) {
      if (now.buckets[i] > before.buckets[i]) {
        increments[i] = static_cast<double>(now.buckets[i] - before.buckets[i]);
      }
    }
    histogram.ObserveMultiple(increments, std::max(0.0, now.seconds_total - before.seconds_total));
  }
}

void ServerMetrics::sample_replicas(const std::vector<EngineStats>& replicas) {
  if (last_sampled_replicas_.size() < replicas.size())
    last_sampled_replicas_.resize(replicas.size());
  for (size_t i = 0; i < replicas.size(); ++i) {
    const EngineStats& stats = replicas[i];
    const prometheus::Labels labels = {{"replica", std::to_string(i)}};
    replica_queue_length_.Add(labels).Set(stats.waiting);
    replica_running_sequences_.Add(labels).Set(stats.running);
    replica_kv_blocks_used_.Add(labels).Set(stats.kv_blocks_total - stats.kv_blocks_free);
    replica_kv_blocks_total_.Add(labels).Set(stats.kv_blocks_total);
    prometheus::Counter& generated = replica_generated_tokens_.Add(labels);
    advance(generated, stats.generated_tokens_total,
            last_sampled_replicas_[i].generated_tokens_total);
    last_sampled_replicas_[i] = stats;
  }
}

void ServerMetrics::sample_gpus(const std::vector<GpuSample>& gpus) {
  if (gpus.empty() && gpu_.memory_used_bytes == nullptr) return;
  if (gpu_.memory_used_bytes == nullptr) {
    gpu_.memory_used_bytes = &add_gauge_family(*registry_, "llamaserve_gpu_memory_used_bytes",
                                               "GPU memory in use by every process (NVML)");
    gpu_.memory_total_bytes = &add_gauge_family(*registry_, "llamaserve_gpu_memory_total_bytes",
                                                "GPU memory installed (NVML)");
    gpu_.utilization_percent =
        &add_gauge_family(*registry_, "llamaserve_gpu_utilization_percent",
                          "Share of NVML's last sample period with a kernel running on the GPU");
    gpu_.temperature_celsius = &add_gauge_family(*registry_, "llamaserve_gpu_temperature_celsius",
                                                 "GPU core temperature (NVML)");
  }
  for (const GpuSample& gpu : gpus) {
    const prometheus::Labels labels = {{"device", std::to_string(gpu.device)}};
    set_or_remove(*gpu_.memory_used_bytes, labels, gpu.memory_used_bytes);
    set_or_remove(*gpu_.memory_total_bytes, labels, gpu.memory_total_bytes);
    set_or_remove(*gpu_.utilization_percent, labels, gpu.utilization_percent);
    set_or_remove(*gpu_.temperature_celsius, labels, gpu.temperature_celsius);
  }
}

}  // namespace llamaserve::server
