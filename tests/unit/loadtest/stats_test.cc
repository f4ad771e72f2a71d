#include "loadtest/stats.h"

#include <cmath>

#include <gtest/gtest.h>

namespace llamaserve::loadtest {
namespace {

using std::chrono::milliseconds;

TEST(Percentile, NearestRank) {
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  EXPECT_EQ(percentile_sorted(v, 50), 50);
  EXPECT_EQ(percentile_sorted(v, 90), 90);
  EXPECT_EQ(percentile_sorted(v, 99), 99);
  EXPECT_EQ(percentile_sorted(v, 100), 100);
  EXPECT_EQ(percentile_sorted(v, 0), 1);
  EXPECT_EQ(percentile_sorted({7}, 99), 7);
  // Ten values: p50 is the 5th, p90 the 9th, p99 the 10th.
  const std::vector<double> ten = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_EQ(percentile_sorted(ten, 50), 5);
  EXPECT_EQ(percentile_sorted(ten, 90), 9);
  EXPECT_EQ(percentile_sorted(ten, 99), 10);
  EXPECT_TRUE(std::isnan(percentile_sorted({}, 50)));
}

TEST(Summarize, SortsAndAverages) {
  const Summary s = summarize({5, 1, 4, 2, 3});
  EXPECT_EQ(s.count, 5);
  EXPECT_DOUBLE_EQ(s.mean, 3);
  EXPECT_EQ(s.p50, 3);
  EXPECT_EQ(s.p99, 5);
  EXPECT_EQ(s.max, 5);
  EXPECT_TRUE(std::isnan(summarize({}).p50));
}

// A request sent at t=0: first content at `ttft_ms`, then `gaps_ms` apart, ended at the last.
RequestRecord request(double ttft_ms, std::vector<float> gaps_ms, int64_t usage_tokens = -1) {
  RequestRecord r;
  const Clock::time_point t0{};
  r.sent = t0;
  r.first_content = t0 + std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double, std::milli>(ttft_ms));
  double last_ms = ttft_ms;
  for (float gap : gaps_ms) last_ms += gap;
  r.last_content = t0 + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double, std::milli>(last_ms));
  r.end = r.last_content;
  r.content_events = static_cast<int64_t>(gaps_ms.size()) + 1;
  r.event_gaps_ms = std::move(gaps_ms);
  r.usage_completion_tokens = usage_tokens;
  return r;
}

TEST(RequestRecord, TokensAndItlWithOneTokenPerEvent) {
  const RequestRecord r = request(100, {10, 20, 30});
  EXPECT_EQ(r.output_tokens(), 4);  // no usage: one token per content event
  EXPECT_EQ(r.itl_ms(), (std::vector<double>{10, 20, 30}));
  EXPECT_EQ(request(100, {10, 20, 30}, 4).itl_ms(), (std::vector<double>{10, 20, 30}));
}

TEST(RequestRecord, ItlSpreadsGapsOverTheTokensOfEachEvent) {
  // 4 events, 7 tokens: 6 tokens after the first over 3 gaps, 2 a gap.
  const RequestRecord r = request(100, {10, 20, 30}, 7);
  EXPECT_EQ(r.output_tokens(), 7);
  EXPECT_EQ(r.itl_ms(), (std::vector<double>{5, 10, 15}));
}

TEST(Slo, TtftAndRequestP99Itl) {
  const RequestRecord fast = request(100, std::vector<float>(99, 10.0f));
  std::vector<float> one_slow_gap(99, 10.0f);
  one_slow_gap[50] = 500;
  const RequestRecord stalled = request(100, one_slow_gap);
  EXPECT_TRUE(meets_slo(fast, {150, 20}));
  EXPECT_FALSE(meets_slo(fast, {50, 0}));
  EXPECT_TRUE(meets_slo(stalled, {150, 0}));
  // 99 gaps: the nearest-rank p99 is the 99th smallest, the one slow gap.
  EXPECT_FALSE(meets_slo(stalled, {0, 20}));
  RequestRecord failed = fast;
  failed.outcome = Outcome::kHttpStatus;
  EXPECT_FALSE(meets_slo(failed, {}));
}

TEST(ComputeStats, CountsThroughputAndGoodput) {
  StepResult step;
  step.load = {true, 4};
  step.elapsed_s = 2;
  step.records.push_back(request(100, {10, 10, 10}));  // 4 tokens, meets the SLO
  step.records.push_back(request(900, {10, 10}, 3));   // TTFT over the SLO
  RequestRecord refused;
  refused.outcome = Outcome::kHttpStatus;
  refused.http_status = 429;
  step.records.push_back(refused);
  RequestRecord timed_out;
  timed_out.outcome = Outcome::kTimeout;
  step.records.push_back(timed_out);

  const StepStats s = compute_stats(step, Slo{500, 0});
  EXPECT_EQ(s.requests, 4);
  EXPECT_EQ(s.ok, 2);
  EXPECT_EQ(s.failed, 2);
  EXPECT_EQ(s.outcomes.at("ok"), 2);
  EXPECT_EQ(s.outcomes.at("http_429"), 1);
  EXPECT_EQ(s.outcomes.at("timeout"), 1);
  EXPECT_EQ(s.output_tokens, 7);
  EXPECT_DOUBLE_EQ(s.output_tokens_per_s, 3.5);
  EXPECT_DOUBLE_EQ(s.requests_per_s, 1);
  EXPECT_EQ(s.ttft_ms.count, 2);
  EXPECT_NEAR(s.ttft_ms.max, 900, 1e-6);
  EXPECT_EQ(s.itl_ms.count, 5);
  EXPECT_NEAR(s.tpot_ms.p50, 10, 1e-6);
  EXPECT_NEAR(s.e2e_ms.max, 920, 1e-6);
  EXPECT_EQ(s.slo_met, 1);
  ASSERT_TRUE(s.goodput_requests_per_s.has_value());
  EXPECT_DOUBLE_EQ(*s.goodput_requests_per_s, 0.5);
  EXPECT_DOUBLE_EQ(*s.goodput_tokens_per_s, 2);
  EXPECT_FALSE(compute_stats(step, Slo{}).goodput_requests_per_s.has_value());
}

TEST(OutcomeKey, Names) {
  EXPECT_EQ(outcome_key(Outcome::kHttpStatus, 503), "http_503");
  EXPECT_EQ(outcome_key(Outcome::kConnectError, 0), "connect_error");
}

}  // namespace
}  // namespace llamaserve::loadtest
