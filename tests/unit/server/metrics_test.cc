// ServerMetrics::render: engine totals keep their names, every replica gets its own series
// (label replica="i"), counters advance by what happened between scrapes, and GPU series
// exist only for the readings a scrape has.
#include "server/metrics.h"

#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

namespace llamaserve::server {
namespace {

EngineStats replica_stats(int32_t running, int32_t waiting, int32_t blocks_total,
                          int32_t blocks_free, uint64_t generated) {
  EngineStats stats;
  stats.running = running;
  stats.waiting = waiting;
  stats.kv_blocks_total = blocks_total;
  stats.kv_blocks_free = blocks_free;
  stats.generated_tokens_total = generated;
  return stats;
}

EngineStats sum(const std::vector<EngineStats>& replicas) {
  EngineStats total;
  for (const EngineStats& r : replicas) {
    total.running += r.running;
    total.waiting += r.waiting;
    total.kv_blocks_total += r.kv_blocks_total;
    total.kv_blocks_free += r.kv_blocks_free;
    total.generated_tokens_total += r.generated_tokens_total;
  }
  return total;
}

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

TEST(ServerMetrics, TotalsAndPerReplicaSeries) {
  ServerMetrics metrics;
  MetricsSnapshot snapshot;
  snapshot.replicas = {replica_stats(2, 1, 64, 40, 100), replica_stats(1, 0, 64, 60, 30)};
  snapshot.engine = sum(snapshot.replicas);
  std::string text = metrics.render(snapshot);
  EXPECT_TRUE(has_line(text, "llamaserve_running_sequences 3")) << text;
  EXPECT_TRUE(has_line(text, "llamaserve_queue_length 1"));
  EXPECT_TRUE(has_line(text, "llamaserve_kv_blocks_used 28"));
  EXPECT_TRUE(has_line(text, "llamaserve_kv_blocks_free 100"));
  EXPECT_TRUE(has_line(text, "llamaserve_generated_tokens_total 130"));
  EXPECT_TRUE(has_line(text, "llamaserve_replica_running_sequences{replica=\"0\"} 2"));
  EXPECT_TRUE(has_line(text, "llamaserve_replica_running_sequences{replica=\"1\"} 1"));
  EXPECT_TRUE(has_line(text, "llamaserve_replica_queue_length{replica=\"0\"} 1"));
  EXPECT_TRUE(has_line(text, "llamaserve_replica_kv_blocks_used{replica=\"0\"} 24"));
  EXPECT_TRUE(has_line(text, "llamaserve_replica_kv_blocks_used{replica=\"1\"} 4"));
  EXPECT_TRUE(has_line(text, "llamaserve_replica_kv_blocks_total{replica=\"1\"} 64"));
  EXPECT_TRUE(has_line(text, "llamaserve_replica_generated_tokens_total{replica=\"0\"} 100"));
  EXPECT_TRUE(has_line(text, "llamaserve_replica_generated_tokens_total{replica=\"1\"} 30"));

  // The next scrape: counters carry on from the engines' totals, gauges follow them.
  snapshot.replicas = {replica_stats(0, 0, 64, 64, 150), replica_stats(1, 0, 64, 60, 31)};
  snapshot.engine = sum(snapshot.replicas);
  text = metrics.render(snapshot);
  EXPECT_TRUE(has_line(text, "llamaserve_generated_tokens_total 181")) << text;
  EXPECT_TRUE(has_line(text, "llamaserve_replica_generated_tokens_total{replica=\"0\"} 150"));
  EXPECT_TRUE(has_line(text, "llamaserve_replica_generated_tokens_total{replica=\"1\"} 31"));
  EXPECT_TRUE(has_line(text, "llamaserve_replica_running_sequences{replica=\"0\"} 0"));
  EXPECT_TRUE(has_line(text, "llamaserve_replica_kv_blocks_used{replica=\"0\"} 0"));
  EXPECT_EQ(text.find("llamaserve_gpu_"), std::string::npos) << "no GPU readings, no GPU series";
}

// The series of llamaserve_engine_step_duration_seconds: "_count{kind=...} ...",
// "_bucket{kind=...,le=...} ..." or "_sum{kind=...} ...".
std::string step_series(const char* part, const char* kind, const char* le, const char* value) {
  std::string line =
      std::string("llamaserve_engine_step_duration_seconds_") + part + "{kind=\"" + kind + "\"";
  if (le != nullptr) line += std::string(",le=\"") + le + "\"";
  return line + "} " + value;
}

// The engine's steps by kind and duration become one histogram series per kind, zero until
// the kind's first step, advancing by what happened between scrapes (cumulative buckets).
TEST(ServerMetrics, StepDurationsByKind) {
  ServerMetrics metrics;
  std::string text = metrics.render({});
  EXPECT_TRUE(has_line(text, step_series("count", "mixed", nullptr, "0"))) << text;
  MetricsSnapshot snapshot;
  StepDurations& decode = snapshot.engine.step_durations[static_cast<int>(StepKind::kDecode)];
  decode.observe(0.007);
  decode.observe(0.0075);
  decode.observe(0.3);
  snapshot.engine.step_durations[static_cast<int>(StepKind::kMixed)].observe(0.011);
  text = metrics.render(snapshot);
  using Series = std::tuple<const char*, const char*, const char*, const char*>;
  auto expect_series = [](const std::string& scraped, const std::vector<Series>& series) {
    for (const auto& [part, kind, le, value] : series) {
      EXPECT_TRUE(has_line(scraped, step_series(part, kind, le, value)))
          << part << " " << kind << " " << (le ? le : "") << scraped;
    }
  };
  expect_series(text, {{"count", "decode", nullptr, "3"},
                       {"bucket", "decode", "0.006", "0"},
                       {"bucket", "decode", "0.008", "2"},
                       {"bucket", "decode", "0.25", "2"},
                       {"bucket", "decode", "+Inf", "3"},
                       {"bucket", "mixed", "0.0125", "1"},
                       {"count", "prompt", nullptr, "0"}});
  // The next scrape adds only the new step.
  decode.observe(0.0015);
  text = metrics.render(snapshot);
  expect_series(text, {{"count", "decode", nullptr, "4"},
                       {"bucket", "decode", "0.002", "1"},
                       {"bucket", "decode", "0.008", "3"},
                       {"sum", "decode", nullptr, "0.316"}});
}

TEST(ServerMetrics, NoModelNoReplicaSamples) {
  ServerMetrics metrics;
  const std::string text = metrics.render({});
  EXPECT_TRUE(has_line(text, "llamaserve_running_sequences 0")) << text;
  EXPECT_EQ(text.find("{replica="), std::string::npos) << text;
  EXPECT_EQ(text.find("llamaserve_gpu_"), std::string::npos) << text;
}

TEST(ServerMetrics, GpuSeriesOnlyForReadings) {
  ServerMetrics metrics;
  MetricsSnapshot snapshot;
  GpuSample full;
  full.device = 0;
  full.memory_used_bytes = 1000;
  full.memory_total_bytes = 144000000000ull;
  full.utilization_percent = 87;
  full.temperature_celsius = 61;
  GpuSample partial;  // a board that reports no temperature or utilization
  partial.device = 3;
  partial.memory_used_bytes = 5;
  partial.memory_total_bytes = 10;
  snapshot.gpus = {full, partial};
  std::string text = metrics.render(snapshot);
  EXPECT_TRUE(has_line(text, "llamaserve_gpu_memory_used_bytes{device=\"0\"} 1000")) << text;
  EXPECT_TRUE(has_line(text, "llamaserve_gpu_memory_total_bytes{device=\"0\"} 144000000000"));
  EXPECT_TRUE(has_line(text, "llamaserve_gpu_utilization_percent{device=\"0\"} 87"));
  EXPECT_TRUE(has_line(text, "llamaserve_gpu_temperature_celsius{device=\"0\"} 61"));
  EXPECT_TRUE(has_line(text, "llamaserve_gpu_memory_used_bytes{device=\"3\"} 5"));
  EXPECT_EQ(text.find("llamaserve_gpu_temperature_celsius{device=\"3\"}"), std::string::npos);
  EXPECT_EQ(text.find("llamaserve_gpu_utilization_percent{device=\"3\"}"), std::string::npos);

  // A reading that fails later takes its series away instead of repeating the old value.
  full.temperature_celsius.reset();
  full.memory_used_bytes = 2000;
  snapshot.gpus = {full, partial};
  text = metrics.render(snapshot);
  EXPECT_TRUE(has_line(text, "llamaserve_gpu_memory_used_bytes{device=\"0\"} 2000")) << text;
  EXPECT_EQ(text.find("llamaserve_gpu_temperature_celsius{device=\"0\"}"), std::string::npos);
}

}  // namespace
}  // namespace llamaserve::server
