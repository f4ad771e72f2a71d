// The Engine end to end with the scripted executor (engine_test_support.h): streaming,
// stops, limits, errors, cancellation, timeouts, drain, shutdown, and many threads at once.
#include "engine/engine.h"

#include <random>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "engine_test_support.h"
#include "grammar/constraint.h"
#include "tokenizer/unicode.h"

namespace llamaserve {
namespace {

using namespace std::chrono_literals;
using testing::byte_tokens;
using testing::collect;
using testing::Collected;
using testing::expect_all_blocks_free;
using testing::greedy_request;
using testing::Harness;
using testing::make_engine;
using testing::run_one;
using testing::ScriptedExecutor;

TEST(EngineTest, GeneratesAndStreamsUntilTheLengthLimit) {
  Harness h = make_engine(testing::next_letter);
  Collected out = run_one(*h.engine, greedy_request("ab", 5));
  EXPECT_EQ(out.text, "cdefg");
  EXPECT_EQ(out.tokens, byte_tokens("cdefg"));
  EXPECT_EQ(out.deltas.size(), 5u);  // one token, one delta: nothing is held back
  EXPECT_EQ(out.n_finish, 1);
  EXPECT_EQ(out.finish.finish_reason, FinishReason::kLength);
  EXPECT_TRUE(out.finish.error.is_ok());
  EXPECT_EQ(out.finish.usage.prompt_tokens, 2);
  EXPECT_EQ(out.finish.usage.completion_tokens, 5);
  EXPECT_GE(out.finish.usage.total_ms, out.finish.usage.ttft_ms);
  EXPECT_GE(out.finish.usage.ttft_ms, out.finish.usage.queue_ms);
  expect_all_blocks_free(*h.engine, 1);
  EngineStats stats = h.engine->stats();
  EXPECT_EQ(stats.requests_finished, 1u);
  EXPECT_EQ(stats.prompt_tokens_total, 2u);
  EXPECT_EQ(stats.generated_tokens_total, 5u);
}

TEST(EngineTest, EndOfGenerationStopsWithoutItsText) {
  Harness h = make_engine(testing::reply_with("Hi!"));
  Collected out = run_one(*h.engine, greedy_request("Q|", 50));
  EXPECT_EQ(out.text, "Hi!");
  EXPECT_EQ(out.finish.finish_reason, FinishReason::kStop);
  EXPECT_EQ(out.finish.usage.completion_tokens, 4);  // the eos token counts

  GenerationRequest ignoring = greedy_request("Q|", 6);
  ignoring.ignore_eos = true;
  out = run_one(*h.engine, std::move(ignoring));
  EXPECT_EQ(out.finish.finish_reason, FinishReason::kLength);
  EXPECT_EQ(out.finish.usage.completion_tokens, 6);
  EXPECT_EQ(out.text.substr(0, 3), "Hi!");
}

TEST(EngineTest, StopTokenIds) {
  Harness h = make_engine(testing::next_letter);
  GenerationRequest request = greedy_request("a", 20);
  request.stop_token_ids = {testing::byte_token('e')};
  Collected out = run_one(*h.engine, std::move(request));
  EXPECT_EQ(out.text, "bcd");
  EXPECT_EQ(out.finish.finish_reason, FinishReason::kStop);
}

TEST(EngineTest, StopStringSplitAcrossTokensIsNeverEmitted) {
  Harness h = make_engine(testing::reply_with("Hello STOP world"));
  GenerationRequest request = greedy_request("|", 50);
  request.stop_strings = {"STOP", "never"};
  Collected out = run_one(*h.engine, std::move(request));
  EXPECT_EQ(out.text, "Hello ");
  for (const std::string& delta : out.deltas)
    EXPECT_EQ(delta.find('S'), std::string::npos) << delta;
  EXPECT_EQ(out.finish.finish_reason, FinishReason::kStop);
  EXPECT_EQ(out.finish.usage.completion_tokens, 10);  // up to the P of STOP

  // A held-back prefix that turns out not to be a stop string is released in order.
  request = greedy_request("|", 50);
  request.stop_strings = {"STOPPED"};
  out = run_one(*h.engine, std::move(request));
  EXPECT_EQ(out.text, "Hello STOP world");
  EXPECT_EQ(out.finish.finish_reason, FinishReason::kStop);  // eos
}

// The logprobs follow the text: the tokens of a matched stop string lose theirs with their text,
// those of a held-back prefix that turns out to be no stop string keep theirs.
TEST(EngineTest, StopStringTokensHaveNoLogprobs) {
  Harness h = make_engine(testing::reply_with("Hello STOP world"));
  for (const auto& [stop, text] : {std::pair<std::string, std::string>{"STOP", "Hello "},
                                   {"STOPPED", "Hello STOP world"},
                                   {"o S", "Hell"}}) {
    GenerationRequest request = greedy_request("|", 50);
    request.stop_strings = {stop};
    request.sampling.logprobs = true;
    Collected out = run_one(*h.engine, std::move(request));
    EXPECT_EQ(out.text, text) << stop;
    std::string joined;
    for (const auto& entry : out.logprobs) joined += entry.at(0).text;
    EXPECT_EQ(joined, text) << stop;
  }
}

TEST(EngineTest, HeldBackTextIsReleasedAtTheLengthLimit) {
  Harness h = make_engine(testing::reply_with("abcST"));
  GenerationRequest request = greedy_request("|", 5);
  request.stop_strings = {"STOP"};
  Collected out = run_one(*h.engine, std::move(request));
  EXPECT_EQ(out.text, "abcST");
  EXPECT_EQ(out.tokens, byte_tokens("abcST"));
  EXPECT_EQ(out.finish.finish_reason, FinishReason::kLength);
}

TEST(EngineTest, MultiByteCharactersNeverBreakAcrossDeltas) {
  const std::string reply = "d\xC3\xA9j\xC3\xA0 \xE2\x82\xAC \xF0\x9F\x98\x80!";  // "déjà € 😀!"
  Harness h = make_engine(testing::reply_with(reply));
  Collected out = run_one(*h.engine, greedy_request("|", 64));
  EXPECT_EQ(out.text, reply);
  for (const std::string& delta : out.deltas) {
    EXPECT_EQ(unicode::sanitize_utf8(delta), delta) << "delta is not valid UTF-8";
  }
  // Tokens of a character whose bytes are not complete ride along with the next text.
  EXPECT_EQ(out.tokens.size(), reply.size());
}

TEST(EngineTest, LogprobsCarryTokenTextAndAlternatives) {
  Harness h = make_engine(testing::next_letter);
  GenerationRequest request = greedy_request("a", 3);
  request.sampling.logprobs = true;
  request.sampling.top_logprobs = 2;
  Collected out = run_one(*h.engine, std::move(request));
  ASSERT_EQ(out.logprobs.size(), 3u);
  const double lse = std::log(std::exp(10.0) + (testing::kByteVocab - 1));
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(out.logprobs[i].size(), 3u);  // chosen + 2 alternatives
    EXPECT_EQ(out.logprobs[i][0].token, testing::byte_token(static_cast<unsigned char>('b' + i)));
    EXPECT_EQ(out.logprobs[i][0].text, std::string(1, static_cast<char>('b' + i)));
    EXPECT_NEAR(out.logprobs[i][0].logprob, 10.0 - lse, 1e-4);
    EXPECT_EQ(out.logprobs[i][1].token, out.logprobs[i][0].token);
    EXPECT_NEAR(out.logprobs[i][2].logprob, -lse, 1e-4);
    EXPECT_EQ(out.logprobs[i][2].token, 0);  // ties: lowest id
  }
}

TEST(EngineTest, SameSeedSameOutput) {
  // A flat distribution over the letters: only the seed decides.
  auto flat = [](std::span<const int32_t>, std::span<float> logits) {
    for (char c = 'a'; c <= 'z'; ++c)
      logits[testing::byte_token(static_cast<unsigned char>(c))] = 5.0f;
  };
  Harness h = make_engine(flat);
  auto sample = [&](uint64_t seed) {
    GenerationRequest request = greedy_request("x", 24);
    request.sampling.temperature = 1.0f;
    request.sampling.top_p = 0.9f;
    request.sampling.seed = seed;
    return run_one(*h.engine, std::move(request)).text;
  };
  const std::string first = sample(99);
  EXPECT_EQ(first.size(), 24u);
  EXPECT_EQ(sample(99), first);
  EXPECT_NE(sample(100), first);
}

TEST(EngineTest, RejectsInvalidRequestsWithClearStatus) {
  EngineConfig config;
  config.max_context = 64;
  Harness h = make_engine(testing::next_letter, config);
  auto expect_error = [&](GenerationRequest request, StatusCode code, std::string_view fragment) {
    auto handle = h.engine->submit(std::move(request));
    ASSERT_FALSE(handle.is_ok());
    EXPECT_EQ(handle.status().code(), code) << handle.status().to_string();
    EXPECT_NE(handle.status().message().find(fragment), std::string::npos)
        << handle.status().message();
  };
  expect_error(greedy_request("", 4), StatusCode::kInvalidArgument, "empty");
  GenerationRequest bad_token = greedy_request("ab", 4);
  bad_token.prompt_tokens[1] = testing::kByteVocab;
  expect_error(bad_token, StatusCode::kInvalidArgument, "position 1");
  bad_token.prompt_tokens[1] = -1;
  expect_error(bad_token, StatusCode::kInvalidArgument, "outside the vocabulary");
  expect_error(greedy_request("ab", 0), StatusCode::kInvalidArgument, "max_new_tokens");
  expect_error(greedy_request(std::string(60, 'a'), 5), StatusCode::kOutOfRange, "context of 64");
  expect_error(greedy_request(std::string(70, 'a'), 1), StatusCode::kOutOfRange, "70 tokens");
  GenerationRequest bad_sampling = greedy_request("a", 1);
  bad_sampling.sampling.top_p = 0.0f;
  expect_error(bad_sampling, StatusCode::kInvalidArgument, "top_p");
  bad_sampling = greedy_request("a", 1);
  bad_sampling.sampling.temperature = -1.0f;
  expect_error(bad_sampling, StatusCode::kInvalidArgument, "temperature");
  // At the limit is fine.
  Collected out = run_one(*h.engine, greedy_request(std::string(60, 'a'), 4));
  EXPECT_EQ(out.finish.finish_reason, FinishReason::kLength);
}

TEST(EngineTest, ContextIsClippedToTheKvCache) {
  EngineConfig config;  // n_ctx_train 4096, but only 8 blocks of 4 tokens
  Harness h = make_engine(testing::next_letter, config, /*n_blocks=*/8, /*block_size=*/4);
  EXPECT_EQ(h.engine->max_context(), 32);
  auto handle = h.engine->submit(greedy_request(std::string(30, 'a'), 3));
  ASSERT_FALSE(handle.is_ok());
  EXPECT_EQ(handle.status().code(), StatusCode::kOutOfRange);
}

TEST(EngineTest, FullQueueFailsFast) {
  EngineConfig config;
  config.max_running = 1;
  config.max_waiting = 2;
  Harness h = make_engine(testing::next_letter, config);
  h.executor->hold();
  auto running = h.engine->submit(greedy_request("a", 3));
  ASSERT_TRUE(running.is_ok());
  h.executor->wait_until_held();  // "a" is scheduled: the queue is empty again
  auto second = h.engine->submit(greedy_request("b", 3));
  auto third = h.engine->submit(greedy_request("c", 3));
  ASSERT_TRUE(second.is_ok());
  ASSERT_TRUE(third.is_ok());
  auto refused = h.engine->submit(greedy_request("d", 3));
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  h.executor->release();
  EXPECT_EQ(collect(*running).text, "bcd");
  EXPECT_EQ(collect(*second).text, "cde");
  EXPECT_EQ(collect(*third).text, "def");
  EXPECT_TRUE(h.engine->submit(greedy_request("d", 1)).is_ok());  // room again
}

TEST(EngineTest, CancelEndsTheStreamAndFreesBlocks) {
  Harness h = make_engine(testing::next_letter);
  h.executor->set_step_delay(2ms);
  auto handle = h.engine->submit(greedy_request("a", 1000));
  ASSERT_TRUE(handle.is_ok());
  std::optional<GenerationEvent> first = handle->next(10s);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->kind, GenerationEvent::Kind::kDelta);
  handle->cancel();
  Collected out = collect(*handle);
  EXPECT_EQ(out.n_finish, 1);
  EXPECT_EQ(out.finish.finish_reason, FinishReason::kCancelled);
  EXPECT_EQ(out.finish.error.code(), StatusCode::kCancelled);
  EXPECT_LT(out.finish.usage.completion_tokens, 1000);
  EXPECT_TRUE(handle->finished());
  expect_all_blocks_free(*h.engine, 1);
}

TEST(EngineTest, DroppingTheHandleCancels) {
  Harness h = make_engine(testing::next_letter);
  h.executor->set_step_delay(1ms);
  {
    auto handle = h.engine->submit(greedy_request("a", 1000));
    ASSERT_TRUE(handle.is_ok());
    ASSERT_TRUE(handle->next(10s).has_value());
  }
  expect_all_blocks_free(*h.engine, 1);
  EXPECT_EQ(h.engine->stats().requests_finished, 1u);
}

TEST(EngineTest, RequestTimeout) {
  Harness h = make_engine(testing::next_letter);
  h.executor->set_step_delay(5ms);
  GenerationRequest request = greedy_request("a", 1000);
  request.timeout = 60ms;
  Collected out = run_one(*h.engine, std::move(request));
  EXPECT_EQ(out.finish.finish_reason, FinishReason::kTimeout);
  EXPECT_EQ(out.finish.error.code(), StatusCode::kDeadlineExceeded);
  EXPECT_GT(out.finish.usage.completion_tokens, 0);
  EXPECT_EQ(out.text.size(), static_cast<size_t>(out.finish.usage.completion_tokens));
  expect_all_blocks_free(*h.engine, 1);
}

TEST(EngineTest, QueueTimeout) {
  EngineConfig config;
  config.max_running = 1;
  Harness h = make_engine(testing::next_letter, config);
  h.executor->set_step_delay(5ms);
  auto busy = h.engine->submit(greedy_request("a", 40));
  ASSERT_TRUE(busy.is_ok());
  GenerationRequest waiting = greedy_request("b", 5);
  waiting.queue_timeout = 30ms;
  Collected out = run_one(*h.engine, std::move(waiting));
  EXPECT_EQ(out.finish.finish_reason, FinishReason::kTimeout);
  EXPECT_EQ(out.finish.usage.completion_tokens, 0);
  EXPECT_NE(out.finish.error.message().find("queue"), std::string::npos);
  EXPECT_EQ(collect(*busy).finish.finish_reason, FinishReason::kLength);
}

TEST(EngineTest, ExecutorErrorFailsTheBatchAndTheEngineKeepsServing) {
  Harness h = make_engine(testing::next_letter);
  h.executor->set_poison_token(testing::byte_token('!'));
  Collected failed = run_one(*h.engine, greedy_request("!", 5));
  EXPECT_EQ(failed.finish.finish_reason, FinishReason::kError);
  EXPECT_EQ(failed.finish.error.code(), StatusCode::kInternal);
  EXPECT_NE(failed.finish.error.message().find("poisoned"), std::string::npos);
  Collected fine = run_one(*h.engine, greedy_request("a", 3));
  EXPECT_EQ(fine.text, "bcd");
  expect_all_blocks_free(*h.engine, 2);
}

TEST(EngineTest, DrainFinishesInFlightThenRefuses) {
  Harness h = make_engine(testing::next_letter);
  h.executor->set_step_delay(1ms);
  std::vector<RequestHandle> handles;
  for (int i = 0; i < 4; ++i)
    handles.push_back(std::move(h.engine->submit(greedy_request("a", 10)).value()));
  EXPECT_TRUE(h.engine->drain(30s).is_ok());
  for (RequestHandle& handle : handles)
    EXPECT_EQ(collect(handle).finish.finish_reason, FinishReason::kLength);
  auto refused = h.engine->submit(greedy_request("a", 1));
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
}

TEST(EngineTest, DrainTimeoutCancelsWhatRemains) {
  Harness h = make_engine(testing::next_letter);
  h.executor->set_step_delay(2ms);
  auto handle = h.engine->submit(greedy_request("a", 1000));
  ASSERT_TRUE(handle.is_ok());
  Status status = h.engine->drain(30ms);
  EXPECT_EQ(status.code(), StatusCode::kDeadlineExceeded);
  Collected out = collect(*handle);
  EXPECT_EQ(out.n_finish, 1);
  EXPECT_EQ(out.finish.finish_reason, FinishReason::kCancelled);
}

TEST(EngineTest, ShutdownFinishesEveryOpenRequest) {
  Harness h = make_engine(testing::next_letter);
  h.executor->set_step_delay(2ms);
  std::vector<RequestHandle> handles;
  for (int i = 0; i < 8; ++i)
    handles.push_back(std::move(h.engine->submit(greedy_request("a", 1000)).value()));
  std::this_thread::sleep_for(10ms);
  h.engine.reset();
  for (RequestHandle& handle : handles) {
    Collected out = collect(handle, 1s);
    EXPECT_FALSE(out.timed_out);
    EXPECT_EQ(out.n_finish, 1);
    EXPECT_EQ(out.finish.finish_reason, FinishReason::kCancelled);
    EXPECT_EQ(out.finish.error.code(), StatusCode::kUnavailable);
  }
}

// The same requests alone, all together, with prefill chunked by a small token budget (and by
// row units weighted by context), and with a KV cache so small that sequences get preempted:
// identical tokens every time.
TEST(EngineTest, BatchingChunkingAndPreemptionDoNotChangeOutputs) {
  std::vector<GenerationRequest> requests;
  std::mt19937 rng(5);
  for (int i = 0; i < 12; ++i) {
    std::string prompt;
    for (int j = 0, n = 1 + static_cast<int>(rng() % 23); j < n; ++j)
      prompt += static_cast<char>('a' + rng() % 26);
    requests.push_back(greedy_request(prompt, 4 + static_cast<int32_t>(rng() % 20)));
  }
  auto run_all = [&](EngineConfig config, int32_t n_blocks, bool together, EngineStats* stats) {
    Harness h = make_engine(testing::context_hash, config, n_blocks, 4);
    std::vector<std::string> texts = testing::run_texts(*h.engine, requests, together, h.executor);
    expect_all_blocks_free(*h.engine, requests.size());
    if (stats) *stats = h.engine->stats();
    return texts;
  };
  const std::vector<std::string> alone = run_all({}, 256, false, nullptr);
  EngineStats stats;
  EXPECT_EQ(run_all({}, 256, true, &stats), alone);
  EngineConfig chunked;
  chunked.max_batch_tokens = 5;
  EXPECT_EQ(run_all(chunked, 256, true, &stats), alone);
  // Every step counted once by kind and duration: the first ones prompts only, then prompt
  // chunks beside decodes, the last ones decodes only.
  uint64_t by_kind = 0;
  for (const StepDurations& kind : stats.step_durations) {
    EXPECT_GT(kind.count, 0u);
    uint64_t in_buckets = 0;
    for (const uint64_t n : kind.buckets) in_buckets += n;
    EXPECT_EQ(in_buckets, kind.count);
    EXPECT_GT(kind.seconds_total, 0.0);
    by_kind += kind.count;
  }
  EXPECT_EQ(by_kind, stats.steps_total);
  // Prompt rows beside decodes weighted hard by their context (a row at 8 positions counts 3).
  EngineConfig weighted;
  weighted.prefill_chunk_tokens = 3;
  weighted.prefill_context_per_row = 4;
  EXPECT_EQ(run_all(weighted, 256, true, nullptr), alone);
  EngineConfig tight;
  tight.max_batch_tokens = 16;
  EXPECT_EQ(run_all(tight, 12, true, &stats), alone);  // 48 tokens for up to 12 sequences
  EXPECT_GT(stats.preemptions_total, 0u);
}

// Seeded sampling is a function of the request alone: the same outputs whether requests run
// one by one or sixteen at a time (sampled on several threads).
TEST(EngineTest, SeededSamplingIsTheSameAloneAndBatched) {
  // Letters with weights that depend on the whole context.
  auto spread = [](std::span<const int32_t> context, std::span<float> logits) {
    uint64_t h = 1469598103934665603ull;
    for (int32_t token : context) h = (h ^ static_cast<uint64_t>(token)) * 1099511628211ull;
    for (char c = 'a'; c <= 'z'; ++c) {
      h = h * 6364136223846793005ull + 1442695040888963407ull;
      logits[testing::byte_token(static_cast<unsigned char>(c))] =
          static_cast<float>(h >> 40) / (1 << 22);
    }
  };
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 16; ++i) {
    GenerationRequest request =
        greedy_request(std::string(1 + i % 5, static_cast<char>('a' + i)), 12);
    request.sampling.temperature = 0.9f;
    request.sampling.top_k = 10;
    request.sampling.top_p = 0.9f;
    request.sampling.seed = 1000 + i;
    requests.push_back(std::move(request));
  }
  EngineConfig config;
  config.sampler_threads = 3;
  Harness h = make_engine(spread, config);
  std::vector<std::string> alone;
  for (const auto& r : requests) alone.push_back(run_one(*h.engine, r).text);
  std::vector<RequestHandle> handles;
  for (const auto& r : requests) handles.push_back(std::move(h.engine->submit(r).value()));
  std::set<std::string> distinct;
  for (size_t i = 0; i < handles.size(); ++i) {
    Collected out = collect(handles[i]);
    EXPECT_EQ(out.text, alone[i]) << "request " << i;
    distinct.insert(out.text);
  }
  EXPECT_GT(distinct.size(), 8u);  // really sampled, not one fixed answer
}

// Several threads submit hundreds of requests with random cancellation; every stream ends
// with exactly one finish event and every block is free at the end.
TEST(EngineTest, StressManyThreadsRandomCancellation) {
  EngineConfig config;
  config.max_running = 16;
  config.max_waiting = 1000;
  config.max_batch_tokens = 32;
  Harness h = make_engine(testing::context_hash, config, /*n_blocks=*/40, /*block_size=*/4);
  constexpr int kThreads = 4;
  constexpr int kPerThread = 75;
  std::atomic<int> finishes{0};
  std::atomic<int> bad{0};
  std::atomic<int> cancelled{0};
  std::atomic<int> completed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<uint32_t>(t));
      std::vector<RequestHandle> handles;
      for (int i = 0; i < kPerThread; ++i) {
        GenerationRequest request =
            greedy_request(std::string(1 + rng() % 12, 'a'), 1 + static_cast<int32_t>(rng() % 8));
        if (rng() % 4 == 0) request.sampling.temperature = 0.7f;
        auto handle = h.engine->submit(std::move(request));
        if (!handle.is_ok()) {
          ++bad;
          continue;
        }
        if (rng() % 5 == 0) handle->cancel();
        handles.push_back(std::move(handle).value());
      }
      for (RequestHandle& handle : handles) {
        if (rng() % 7 == 0) handle.cancel();
        Collected out = collect(handle, 30s);
        if (out.timed_out || out.n_finish != 1) ++bad;
        finishes += out.n_finish;
        if (out.finish.finish_reason == FinishReason::kCancelled) ++cancelled;
        if (out.finish.finish_reason == FinishReason::kLength) ++completed;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(finishes.load(), kThreads * kPerThread);
  EXPECT_GT(cancelled.load(), 0);
  EXPECT_GT(completed.load(), 0);
  EXPECT_EQ(cancelled.load() + completed.load(), kThreads * kPerThread);
  expect_all_blocks_free(*h.engine, kThreads * kPerThread);
  EXPECT_EQ(h.engine->stats().requests_finished, static_cast<uint64_t>(kThreads * kPerThread));
  EXPECT_LE(h.executor->max_rows_seen(), 32);
}

}  // namespace
}  // namespace llamaserve

namespace llamaserve {
namespace {

std::shared_ptr<const grammar::Constraint> schema_constraint(const char* schema) {
  static grammar::ConstraintCache cache(testing::make_byte_tokenizer());
  auto constraint =
      cache.get(grammar::FormatKind::kJsonSchema, nlohmann::ordered_json::parse(schema));
  EXPECT_TRUE(constraint.is_ok()) << constraint.status().to_string();
  return constraint.is_ok() ? *constraint : nullptr;
}

// The executor wants letters; the schema allows only its document, then end-of-generation.
TEST(EngineConstraint, MasksTokensAndEndsWhenTheDocumentIsComplete) {
  Harness h = make_engine(testing::context_hash);
  GenerationRequest request = greedy_request("q", 30);
  request.sampling.constraint = schema_constraint(R"({"enum":["yes","no"]})");
  Collected out = run_one(*h.engine, request);
  // Greedy over equal logits takes the lowest id: '"', then 'n' (before 'y'), 'o', '"'.
  EXPECT_EQ(out.text, "\"no\"");
  EXPECT_EQ(out.finish.finish_reason, FinishReason::kStop);
  EXPECT_EQ(h.engine->stats().device_sampled_steps_total, 0u);
}

// The mask comes before truncation: top-k 1 keeps the best token the grammar allows, not the
// best token overall.
TEST(EngineConstraint, SamplerMasksBeforeTopK) {
  SamplingParams params;
  params.temperature = 1.0f;
  params.top_k = 1;
  params.constraint = schema_constraint(R"({"type":"array","items":{"type":"integer"}})");
  Sampler sampler(params, {}, 1);
  SamplerScratch scratch;
  std::vector<float> logits(testing::kByteVocab, 0.0f);
  logits[testing::byte_token('x')] = 20.0f;
  logits[testing::byte_token('{')] = 10.0f;
  logits[testing::byte_token('[')] = 5.0f;
  EXPECT_EQ(sampler.sample(logits, scratch).token, testing::byte_token('['));
  sampler.accept(testing::byte_token('['));
  std::fill(logits.begin(), logits.end(), 0.0f);
  logits[testing::byte_token('a')] = 20.0f;
  logits[testing::byte_token('7')] = 1.0f;
  EXPECT_EQ(sampler.sample(logits, scratch).token, testing::byte_token('7'));
  sampler.accept(testing::byte_token('7'));
  // On a device the row carries the same mask (bit t of the words: token t allowed now).
  const std::optional<RowSampling> row = sampler.device_sampling(2);
  ASSERT_TRUE(row.has_value());
  ASSERT_NE(row->allowed, nullptr);
  ASSERT_GE(row->allowed_words * 64, testing::kByteVocab);
  auto allowed = [&](char c) {
    const int32_t t = testing::byte_token(c);
    return ((row->allowed[t / 64] >> (t % 64)) & 1) != 0;
  };
  EXPECT_TRUE(allowed('8'));
  EXPECT_TRUE(allowed(','));
  EXPECT_TRUE(allowed(']'));
  EXPECT_FALSE(allowed('a'));
  EXPECT_FALSE(allowed('{'));
}

// Constrained and free requests batched, sampled, with a KV cache so small that sequences are
// preempted and recomputed: each output is the same as alone, and every constrained one is a
// complete document.
TEST(EngineConstraint, BatchedPreemptedAndMixedRequestsKeepTheirPlace) {
  const auto constraint = schema_constraint(
      R"({"type":"array","items":{"type":"integer","minimum":0,"maximum":99},"maxItems":4})");
  const grammar::Grammar& g = constraint->grammar();
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 12; ++i) {
    GenerationRequest request = greedy_request(std::string(1 + i % 7, 'a' + i), 24);
    request.sampling.temperature = 1.0f;
    request.sampling.seed = 77 + i;
    if (i % 3 != 2) request.sampling.constraint = constraint;
    requests.push_back(std::move(request));
  }
  auto run_all = [&](int32_t n_blocks, bool together, EngineStats* stats) {
    EngineConfig config;
    config.max_batch_tokens = 16;
    Harness h = make_engine(testing::context_hash, config, n_blocks, 4);
    std::vector<std::string> texts;
    if (together) {
      std::vector<RequestHandle> handles;
      for (const auto& r : requests) handles.push_back(std::move(h.engine->submit(r).value()));
      for (RequestHandle& handle : handles) texts.push_back(collect(handle).text);
    } else {
      for (const auto& r : requests) texts.push_back(run_one(*h.engine, r).text);
    }
    if (stats) *stats = h.engine->stats();
    return texts;
  };
  const std::vector<std::string> alone = run_all(256, false, nullptr);
  EngineStats stats;
  EXPECT_EQ(run_all(16, true, &stats), alone);
  EXPECT_GT(stats.preemptions_total, 0u);
  for (size_t i = 0; i < alone.size(); ++i) {
    grammar::Matcher matcher(g);
    const bool valid = matcher.advance(alone[i]) && matcher.is_complete();
    if (requests[i].sampling.constraint) {
      EXPECT_TRUE(valid) << i << ": " << alone[i];
    } else {
      EXPECT_FALSE(valid) << i << ": " << alone[i];  // free requests write letters
    }
  }
}

}  // namespace
}  // namespace llamaserve
