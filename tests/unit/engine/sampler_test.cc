#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include <gtest/gtest.h>

namespace llamaserve {
namespace {

std::vector<float> logits_from_probs(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

// Draws `n` tokens from fresh copies of `logits` and returns the frequency of each token.
std::vector<double> frequencies(Sampler& sampler, const std::vector<float>& logits, int n) {
  SamplerScratch scratch;
  std::vector<double> counts(logits.size(), 0.0);
  for (int i = 0; i < n; ++i) {
    std::vector<float> row = logits;
    counts[static_cast<size_t>(sampler.sample(row, scratch).token)] += 1.0;
  }
  for (double& c : counts) c /= n;
  return counts;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                  double tolerance) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], tolerance) << "token " << i;
  }
}

SamplingParams with_temperature(float temperature) {
  SamplingParams params;
  params.temperature = temperature;
  return params;
}

TEST(SamplerTest, GreedyTakesArgmaxAndLowestIdOnTies) {
  SamplerScratch scratch;
  Sampler sampler(with_temperature(0.0f), {}, 1);
  std::vector<float> logits = {0.1f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(sampler.sample(logits, scratch).token, 1);
  logits = {-5.0f, -4.0f, -6.0f};
  EXPECT_EQ(sampler.sample(logits, scratch).token, 1);
}

TEST(SamplerTest, TemperatureOneFollowsTheSoftmax) {
  const std::vector<double> probs = {0.5, 0.3, 0.15, 0.05};
  Sampler sampler(with_temperature(1.0f), {}, 42);
  // 40000 draws: the standard error of a frequency is at most 0.0025.
  expect_close(frequencies(sampler, logits_from_probs(probs), 40000), probs, 0.012);
}

TEST(SamplerTest, TemperatureSharpensAndFlattens) {
  const std::vector<double> probs = {0.5, 0.3, 0.15, 0.05};
  for (float temperature : {0.5f, 2.0f}) {
    std::vector<double> want;
    for (double p : probs) want.push_back(std::pow(p, 1.0 / temperature));
    double sum = std::accumulate(want.begin(), want.end(), 0.0);
    for (double& w : want) w /= sum;
    Sampler sampler(with_temperature(temperature), {}, 3);
    expect_close(frequencies(sampler, logits_from_probs(probs), 40000), want, 0.012);
  }
}

TEST(SamplerTest, SameSeedSameTokensDifferentSeedDifferentTokens) {
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i % 7) * 0.3f;
  auto run = [&](uint64_t seed) {
    SamplerScratch scratch;
    SamplingParams params = with_temperature(0.9f);
    params.top_p = 0.95f;
    Sampler sampler(params, {}, seed);
    std::vector<int32_t> tokens;
    for (int i = 0; i < 64; ++i) {
      std::vector<float> row = logits;
      tokens.push_back(sampler.sample(row, scratch).token);
    }
    return tokens;
  };
  EXPECT_EQ(run(1234), run(1234));
  EXPECT_NE(run(1234), run(1235));
}

TEST(SamplerTest, TopKKeepsTheKMostLikelyRenormalised) {
  const std::vector<double> probs = {0.1, 0.4, 0.05, 0.3, 0.15};
  SamplingParams params = with_temperature(1.0f);
  params.top_k = 2;
  Sampler sampler(params, {}, 5);
  expect_close(frequencies(sampler, logits_from_probs(probs), 40000), {0, 4.0 / 7, 0, 3.0 / 7, 0},
               0.012);
}

TEST(SamplerTest, TopPKeepsTheSmallestSetReachingTheMass) {
  const std::vector<double> probs = {0.05, 0.5, 0.15, 0.3};
  SamplingParams params = with_temperature(1.0f);
  params.top_p = 0.75f;  // 0.5 + 0.3 reaches it
  Sampler two(params, {}, 9);
  expect_close(frequencies(two, logits_from_probs(probs), 40000), {0, 0.625, 0, 0.375}, 0.012);
  params.top_p = 0.9f;  // needs the 0.15 too
  Sampler three(params, {}, 9);
  expect_close(frequencies(three, logits_from_probs(probs), 40000),
               {0, 0.5 / 0.95, 0.15 / 0.95, 0.3 / 0.95}, 0.012);
}

// Reference for a large vocabulary: the kept set by a full sort, compared with what the
// sampler ever draws (the sampler selects without sorting).
TEST(SamplerTest, TopPOnALargeVocabularyMatchesAFullSort) {
  const int n_vocab = 3000;
  std::vector<float> logits(n_vocab);
  for (int i = 0; i < n_vocab; ++i) logits[i] = static_cast<float>(((i * 7919) % n_vocab)) * 0.002f;
  const float top_p = 0.6f;
  std::vector<int32_t> order(n_vocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  double z = 0;
  for (float l : logits) z += std::exp(static_cast<double>(l));
  std::vector<bool> keep(n_vocab, false);
  double mass = 0;
  for (int32_t token : order) {
    keep[token] = true;
    mass += std::exp(static_cast<double>(logits[token])) / z;
    if (mass >= top_p) break;
  }
  const auto n_keep = std::count(keep.begin(), keep.end(), true);
  ASSERT_GT(n_keep, 256);  // a large kept set: many bisection rounds

  SamplingParams params = with_temperature(1.0f);
  params.top_p = top_p;
  Sampler sampler(params, {}, 17);
  SamplerScratch scratch;
  std::vector<bool> drawn(n_vocab, false);
  for (int i = 0; i < 5000; ++i) {
    std::vector<float> row = logits;
    int32_t token = sampler.sample(row, scratch).token;
    ASSERT_TRUE(keep[token]) << "token " << token << " is outside the top-p set";
    drawn[token] = true;
  }
  // The least likely kept token still shows up; a set cut short would miss the tail.
  EXPECT_TRUE(drawn[order[n_keep - 1]] || drawn[order[n_keep - 2]] || drawn[order[n_keep - 3]]);
}

TEST(SamplerTest, MinPDropsTokensBelowTheFractionOfTheBest) {
  const std::vector<double> probs = {0.5, 0.05, 0.3, 0.15};
  SamplingParams params = with_temperature(1.0f);
  params.min_p = 0.2f;  // threshold 0.1: the 0.05 goes
  Sampler sampler(params, {}, 21);
  expect_close(frequencies(sampler, logits_from_probs(probs), 40000),
               {0.5 / 0.95, 0, 0.3 / 0.95, 0.15 / 0.95}, 0.012);
  // Through the sorted path (with top-k), same answer.
  params.top_k = 3;
  params.min_p = 0.4f;  // threshold 0.2 of the best: only 0.5 and 0.3 stay
  Sampler with_top_k(params, {}, 21);
  expect_close(frequencies(with_top_k, logits_from_probs(probs), 40000), {0.625, 0, 0.375, 0},
               0.012);
}

TEST(SamplerTest, RepetitionPenaltyCoversPromptAndOutput) {
  SamplingParams params = with_temperature(0.0f);
  params.repetition_penalty = 2.0f;
  const std::vector<int32_t> prompt = {0, 1};
  Sampler sampler(params, prompt, 1);
  SamplerScratch scratch;
  std::vector<float> logits = {2.0f, -2.0f, 1.5f, 0.5f};
  sampler.sample(logits, scratch);  // penalised in place
  EXPECT_EQ(logits, (std::vector<float>{1.0f, -4.0f, 1.5f, 0.5f}));
  sampler.accept(3);
  logits = {2.0f, -2.0f, 1.5f, 0.5f};
  EXPECT_EQ(sampler.sample(logits, scratch).token, 2);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, -4.0f, 1.5f, 0.25f}));
}

TEST(SamplerTest, PresenceAndFrequencyPenaltiesCountOutputOnly) {
  SamplingParams params = with_temperature(0.0f);
  params.presence_penalty = 0.5f;
  params.frequency_penalty = 0.25f;
  const std::vector<int32_t> prompt = {0};
  Sampler sampler(params, prompt, 1);
  sampler.accept(2);
  sampler.accept(2);
  sampler.accept(1);
  SamplerScratch scratch;
  std::vector<float> logits = {1.0f, 1.0f, 1.0f, 1.0f};
  EXPECT_EQ(sampler.sample(logits, scratch).token, 0);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, 0.25f, 0.0f, 1.0f}));
}

TEST(SamplerTest, LogprobsAreTheLogSoftmaxAfterTemperature) {
  SamplingParams params = with_temperature(0.0f);
  params.logprobs = true;
  params.top_logprobs = 2;
  Sampler greedy(params, {}, 1);
  SamplerScratch scratch;
  std::vector<float> logits = {1.0f, 2.0f, 3.0f, 0.0f};
  SampledToken out = greedy.sample(logits, scratch);
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0) + std::exp(0.0));
  EXPECT_EQ(out.token, 2);
  EXPECT_NEAR(out.logprob, 3.0 - lse, 1e-5);
  ASSERT_EQ(out.top_logprobs.size(), 2u);
  EXPECT_EQ(out.top_logprobs[0].first, 2);
  EXPECT_EQ(out.top_logprobs[1].first, 1);
  EXPECT_NEAR(out.top_logprobs[1].second, 2.0 - lse, 1e-5);

  params.temperature = 2.0f;
  params.top_k = 1;  // truncation does not change the reported values
  Sampler hot(params, {}, 1);
  logits = {1.0f, 2.0f, 3.0f, 0.0f};
  out = hot.sample(logits, scratch);
  const double lse_hot = std::log(std::exp(0.5) + std::exp(1.0) + std::exp(1.5) + std::exp(0.0));
  EXPECT_EQ(out.token, 2);
  EXPECT_NEAR(out.logprob, 1.5 - lse_hot, 1e-5);
  EXPECT_NEAR(out.top_logprobs[1].second, 1.0 - lse_hot, 1e-5);
}

TEST(SamplerTest, NoLogprobsUnlessAsked) {
  Sampler sampler(with_temperature(0.7f), {}, 1);
  EXPECT_FALSE(sampler.wants_logprobs());
  SamplerScratch scratch;
  std::vector<float> logits = {1.0f, 2.0f};
  SampledToken out = sampler.sample(logits, scratch);
  EXPECT_EQ(out.logprob, 0.0f);
  EXPECT_TRUE(out.top_logprobs.empty());
}

// What a GPU may draw: plain temperature/top-k/top-p/seed requests, with the step as the
// draw's counter; anything the host sampler alone does keeps the request on the host.
TEST(SamplerTest, DeviceSamplingOnlyForWhatTheDeviceDraws) {
  SamplingParams params = with_temperature(0.8f);
  params.top_k = 40;
  params.top_p = 0.9f;
  Sampler plain(params, {}, 1234);
  const std::optional<RowSampling> row = plain.device_sampling(7);
  ASSERT_TRUE(row.has_value());
  EXPECT_EQ(row->temperature, 0.8f);
  EXPECT_EQ(row->top_k, 40);
  EXPECT_EQ(row->top_p, 0.9f);
  EXPECT_EQ(row->seed, 1234u);
  EXPECT_EQ(row->offset, 7u);
  EXPECT_EQ(row->allowed, nullptr);

  const std::optional<RowSampling> greedy =
      Sampler(with_temperature(0.0f), {}, 1).device_sampling(0);
  ASSERT_TRUE(greedy.has_value());
  EXPECT_EQ(greedy->temperature, 0.0f);

  auto host_only = [](void (*change)(SamplingParams&)) {
    SamplingParams p = with_temperature(0.8f);
    change(p);
    return !Sampler(p, {}, 1).device_sampling(0).has_value();
  };
  EXPECT_TRUE(host_only([](SamplingParams& p) { p.repetition_penalty = 1.1f; }));
  EXPECT_TRUE(host_only([](SamplingParams& p) { p.presence_penalty = 0.5f; }));
  EXPECT_TRUE(host_only([](SamplingParams& p) { p.frequency_penalty = 0.5f; }));
  EXPECT_TRUE(host_only([](SamplingParams& p) { p.min_p = 0.05f; }));
  EXPECT_TRUE(host_only([](SamplingParams& p) { p.logprobs = true; }));
  EXPECT_TRUE(host_only([](SamplingParams& p) { p.top_logprobs = 2; }));
}

}  // namespace
}  // namespace llamaserve
