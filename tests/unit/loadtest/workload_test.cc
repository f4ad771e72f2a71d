#include "loadtest/workload.h"

#include <cmath>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

namespace llamaserve::loadtest {
namespace {

TEST(LengthRange, Parses) {
  auto fixed = parse_length_range("128");
  ASSERT_TRUE(fixed.is_ok());
  EXPECT_EQ(fixed->min, 128);
  EXPECT_TRUE(fixed->fixed());
  auto range = parse_length_range("64:256");
  ASSERT_TRUE(range.is_ok());
  EXPECT_EQ(range->min, 64);
  EXPECT_EQ(range->max, 256);
  for (const char* bad : {"0", "-3", "5:3", "abc", "1:", ":4", "12x", "", "1:2:3"}) {
    EXPECT_FALSE(parse_length_range(bad).is_ok()) << bad;
  }
}

TEST(LengthRange, DrawsUniformlyOverTheWholeRange) {
  std::mt19937_64 rng(7);
  const LengthRange range{64, 67};
  std::vector<int> counts(4);
  for (int i = 0; i < 40000; ++i) {
    const int32_t length = draw_length(range, rng);
    ASSERT_GE(length, 64);
    ASSERT_LE(length, 67);
    ++counts[static_cast<size_t>(length - 64)];
  }
  for (int count : counts) EXPECT_NEAR(count, 10000, 400);
  EXPECT_EQ(draw_length(LengthRange{9, 9}, rng), 9);
}

TEST(PoissonSchedule, ExponentialGapsAndPoissonCounts) {
  constexpr double kRate = 50;
  PoissonSchedule schedule(kRate, 11);
  std::vector<double> times;
  for (int i = 0; i < 50000; ++i) times.push_back(schedule.next_s());
  for (size_t i = 1; i < times.size(); ++i) ASSERT_GT(times[i], times[i - 1]);
  std::vector<double> gaps = {times[0]};
  for (size_t i = 1; i < times.size(); ++i) gaps.push_back(times[i] - times[i - 1]);
  double mean = 0, square = 0;
  for (double g : gaps) mean += g;
  mean /= static_cast<double>(gaps.size());
  for (double g : gaps) square += (g - mean) * (g - mean);
  const double sd = std::sqrt(square / static_cast<double>(gaps.size()));
  EXPECT_NEAR(mean, 1 / kRate, 0.02 / kRate);
  EXPECT_NEAR(sd / mean, 1.0, 0.03);  // an exponential's coefficient of variation is 1
  // Arrivals per second: mean and variance both the rate.
  std::vector<int> per_second(static_cast<size_t>(times.back()));
  for (double t : times) {
    if (static_cast<size_t>(t) < per_second.size()) ++per_second[static_cast<size_t>(t)];
  }
  double count_mean = 0, count_var = 0;
  for (int c : per_second) count_mean += c;
  count_mean /= static_cast<double>(per_second.size());
  for (int c : per_second) count_var += (c - count_mean) * (c - count_mean);
  count_var /= static_cast<double>(per_second.size());
  EXPECT_NEAR(count_mean, kRate, 1.0);
  EXPECT_NEAR(count_var / count_mean, 1.0, 0.2);
  // The same seed gives the same schedule.
  PoissonSchedule again(kRate, 11);
  EXPECT_EQ(again.next_s(), times[0]);
}

TEST(PromptLines, ReadsPromptsMessagesAndMaxTokens) {
  std::istringstream in(
      "{\"prompt\": \"hello\"}\n"
      "\n"
      "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 7}\n");
  auto lines = read_prompt_lines(in, "p.jsonl");
  ASSERT_TRUE(lines.is_ok()) << lines.status().to_string();
  ASSERT_EQ(lines->size(), 2u);
  EXPECT_EQ((*lines)[0].prompt, "hello");
  EXPECT_EQ((*lines)[0].max_tokens, 0);
  EXPECT_TRUE((*lines)[1].messages.is_array());
  EXPECT_EQ((*lines)[1].max_tokens, 7);
}

TEST(PromptLines, MalformedLinesNameTheLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"prompt\": \"a\"}\n{\"prompt\": \"b\"\n", "p.jsonl:2: not valid JSON"},
      {"[1, 2]\n", "p.jsonl:1: expected a JSON object"},
      {"{\"text\": \"a\"}\n", "p.jsonl:1: needs \"prompt\" or \"messages\""},
      {"{\"prompt\": 5}\n", "p.jsonl:1: \"prompt\" must be a non-empty string"},
      {"{\"messages\": []}\n", "p.jsonl:1: \"messages\" must be a non-empty array"},
      {"{\"messages\": [{\"role\": \"user\"}]}\n", "p.jsonl:1: each message needs"},
      {"\n{\"prompt\": \"a\", \"max_tokens\": 0}\n", "p.jsonl:2: \"max_tokens\" must be"},
      {"\n\n", "p.jsonl: no prompts"},
  };
  for (const auto& [text, message] : cases) {
    std::istringstream in(text);
    auto lines = read_prompt_lines(in, "p.jsonl");
    ASSERT_FALSE(lines.is_ok()) << text;
    EXPECT_NE(lines.status().message().find(message), std::string::npos)
        << lines.status().message();
  }
}

LoadtestConfig config_with(LengthRange prompt, LengthRange output) {
  LoadtestConfig c;
  c.prompt_tokens = prompt;
  c.output_tokens = output;
  return c;
}

std::vector<int32_t> pool_of(int n) {
  std::vector<int32_t> pool;
  for (int i = 0; i < n; ++i) pool.push_back(1000 + i);
  return pool;
}

TEST(RequestGenerator, TokenPromptsHaveExactLengthsAndDistinctStarts) {
  LoadtestConfig c = config_with({20, 40}, {5, 9});
  auto generator = RequestGenerator::create(c, pool_of(50), "m", 12345);
  ASSERT_TRUE(generator.is_ok());
  std::set<std::vector<int32_t>> heads;
  for (int64_t i = 0; i < 300; ++i) {
    const PlannedRequest r = generator->make(i);
    const nlohmann::json body = nlohmann::json::parse(r.body);
    EXPECT_EQ(r.target, "/v1/completions");
    EXPECT_EQ(body["model"], "m");
    EXPECT_EQ(body["stream"], true);
    EXPECT_EQ(body["stream_options"]["include_usage"], true);
    EXPECT_EQ(body["ignore_eos"], true);
    const auto prompt = body["prompt"].get<std::vector<int32_t>>();
    EXPECT_EQ(static_cast<int64_t>(prompt.size()), r.planned_prompt_tokens);
    EXPECT_GE(prompt.size(), 20u);
    EXPECT_LE(prompt.size(), 40u);
    EXPECT_GE(body["max_tokens"].get<int>(), 5);
    EXPECT_LE(body["max_tokens"].get<int>(), 9);
    heads.insert(std::vector<int32_t>(prompt.begin(), prompt.begin() + 3));
    // The same index gives the same request.
    EXPECT_EQ(generator->make(i).body, r.body);
  }
  EXPECT_EQ(heads.size(), 300u);  // no two requests share their first three tokens
  // Another run (salt) differs in its prompts.
  auto other = RequestGenerator::create(c, pool_of(50), "m", 999);
  EXPECT_NE(other->make(0).body, generator->make(0).body);
}

TEST(RequestGenerator, SharedPrefixIsTheSameForEveryRequest) {
  LoadtestConfig c = config_with({32, 32}, {4, 4});
  c.shared_prefix_tokens = 16;
  auto generator = RequestGenerator::create(c, pool_of(50), "", 1);
  ASSERT_TRUE(generator.is_ok());
  const auto first = nlohmann::json::parse(generator->make(0).body)["prompt"];
  const auto second = nlohmann::json::parse(generator->make(1).body)["prompt"];
  ASSERT_EQ(first.size(), 32u);
  for (size_t i = 0; i < 16; ++i) EXPECT_EQ(first[i], second[i]);
  EXPECT_NE(first[16], second[16]);
  EXPECT_FALSE(nlohmann::json::parse(generator->make(0).body).contains("model"));
}

TEST(RequestGenerator, TextAndChatPrompts) {
  LoadtestConfig c = config_with({10, 10}, {4, 4});
  c.endpoint = Endpoint::kChat;
  c.ignore_eos = false;
  auto generator = RequestGenerator::create(c, {}, "m", 1);
  ASSERT_TRUE(generator.is_ok());
  const PlannedRequest r = generator->make(3);
  const nlohmann::json body = nlohmann::json::parse(r.body);
  EXPECT_EQ(r.target, "/v1/chat/completions");
  EXPECT_FALSE(body.contains("ignore_eos"));
  EXPECT_FALSE(body.contains("temperature"));  // the server's default unless given
  c.temperature = 0.0;
  auto greedy = RequestGenerator::create(c, {}, "m", 1);
  ASSERT_TRUE(greedy.is_ok());
  EXPECT_EQ(nlohmann::json::parse(greedy->make(3).body)["temperature"], 0.0);
  const std::string content = body["messages"][0]["content"];
  EXPECT_EQ(content.rfind("[3-", 0), 0u) << content;              // the tag leads
  EXPECT_EQ(std::count(content.begin(), content.end(), ' '), 9);  // tag + 9 words
}

}  // namespace
}  // namespace llamaserve::loadtest
