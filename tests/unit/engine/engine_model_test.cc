// The Engine with the real CPU executor and the real SmolLM2-135M model: batching, chunked
// prefill and preemption must not change greedy tokens, and a crowd of concurrent requests
// with random cancellation must all end cleanly. Skipped when the model file is absent.
#include <filesystem>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/generate.h"
#include "executor/cpu_executor.h"
#include "model/weights.h"
#include "smollm2_engine_test.h"
#include "tokenizer/tokenizer.h"

namespace llamaserve {
namespace {

using namespace std::chrono_literals;

class EngineModelTest : public testing::SmolLm2EngineTest {
 protected:
  // Generated tokens of each request, submitted one after another or all at once.
  static std::vector<std::vector<int32_t>> generate_all(
      Engine& engine, const std::vector<GenerationRequest>& requests, bool together) {
    std::vector<std::vector<int32_t>> out;
    if (!together) {
      for (const GenerationRequest& request : requests) {
        auto completion = generate(engine, request);
        EXPECT_TRUE(completion.is_ok()) << completion.status().to_string();
        EXPECT_EQ(completion->finish_reason, FinishReason::kLength);
        out.push_back(completion->tokens);
      }
      return out;
    }
    std::vector<RequestHandle> handles;
    for (const GenerationRequest& request : requests) {
      auto handle = engine.submit(request);
      EXPECT_TRUE(handle.is_ok()) << handle.status().to_string();
      handles.push_back(std::move(handle).value());
    }
    for (RequestHandle& handle : handles) {
      std::vector<int32_t> tokens;
      while (auto event = handle.next(120s)) {
        tokens.insert(tokens.end(), event->tokens.begin(), event->tokens.end());
        if (event->kind == GenerationEvent::Kind::kFinish) {
          EXPECT_EQ(event->finish_reason, FinishReason::kLength) << event->error.to_string();
        }
      }
      out.push_back(std::move(tokens));
    }
    return out;
  }

  // Prompts of 6 to 17 tokens whose generations cross a 16-token block boundary.
  static std::vector<GenerationRequest> sample_requests() {
    return {greedy("The capital of France is a city that is famous for its", 8),
            greedy("1, 2, 3, 4, 5, 6,", 4),
            greedy("Write a short poem about the sea. The waves", 8),
            greedy("def fibonacci(n):", 12),
            greedy("In 1492, Columbus sailed across the Atlantic Ocean and reached", 5)};
  }

  // The reference: each request alone with a roomy cache, prompt in one pass. Computed once
  // for the suite (CPU time is the budget of this test binary).
  static const std::vector<std::vector<int32_t>>& reference_tokens() {
    if (reference_.empty()) {
      EngineConfig no_cache;
      no_cache.prefix_caching = false;
      auto engine = make_engine(2048, no_cache);
      EXPECT_NE(engine, nullptr);
      if (engine) reference_ = generate_all(*engine, sample_requests(), /*together=*/false);
    }
    return reference_;
  }

  static void expect_all_blocks_free(const Engine& engine, uint64_t n_finished) {
    for (int i = 0; i < 400; ++i) {
      EngineStats stats = engine.stats();
      if (stats.requests_finished >= n_finished && stats.kv_blocks_free == stats.kv_blocks_total)
        return;
      std::this_thread::sleep_for(5ms);
    }
    EngineStats stats = engine.stats();
    EXPECT_EQ(stats.requests_finished, n_finished);
    EXPECT_EQ(stats.kv_blocks_free, stats.kv_blocks_total);
  }

  inline static std::vector<std::vector<int32_t>> reference_;
};

// The same tokens as each request alone come out when the requests share batches, and when
// every prompt is cut into chunks of at most 5 tokens.
TEST_F(EngineModelTest, BatchedAndChunkedEqualUnbatched) {
  const std::vector<GenerationRequest> requests = sample_requests();
  const auto& alone = reference_tokens();
  ASSERT_EQ(alone.size(), requests.size());
  for (size_t i = 0; i < alone.size(); ++i)
    ASSERT_EQ(alone[i].size(), static_cast<size_t>(requests[i].max_new_tokens));

  auto engine = make_engine(2048);
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(generate_all(*engine, requests, /*together=*/true), alone);
  expect_all_blocks_free(*engine, requests.size());

  EngineConfig chunked;
  chunked.max_batch_tokens = 5;
  auto chunked_engine = make_engine(2048, chunked);
  ASSERT_NE(chunked_engine, nullptr);
  EXPECT_EQ(generate_all(*chunked_engine, requests, /*together=*/true), alone);
}

// A KV cache of 4 blocks of 16 tokens cannot hold all the sequences at once: they are
// preempted and recomputed, and still produce the same greedy tokens.
TEST_F(EngineModelTest, PreemptionWithATinyCacheKeepsGreedyTokens) {
  const std::vector<GenerationRequest> requests = sample_requests();
  const auto& alone = reference_tokens();
  auto tiny = make_engine(64);
  ASSERT_NE(tiny, nullptr);
  EXPECT_EQ(tiny->stats().kv_blocks_total * 16, 64);
  // A 60-token prompt holds the whole cache while the five requests are submitted, so that
  // they enter the waiting queue together, whatever the speed of the build: four are admitted
  // at once and must preempt one another as they grow past their first block.
  std::string long_prompt;
  for (int i = 0; i < 60; ++i) long_prompt += " a";
  GenerationRequest blocker = greedy(long_prompt, 1);
  ASSERT_GE(blocker.prompt_tokens.size(), 49u);
  ASSERT_LE(blocker.prompt_tokens.size(), 63u);
  auto blocker_handle = tiny->submit(blocker);
  ASSERT_TRUE(blocker_handle.is_ok()) << blocker_handle.status().to_string();
  EXPECT_EQ(generate_all(*tiny, requests, /*together=*/true), alone);
  while (auto event = blocker_handle->next(120s)) {
    if (event->kind == GenerationEvent::Kind::kFinish) {
      EXPECT_EQ(event->finish_reason, FinishReason::kLength) << event->error.to_string();
    }
  }
  expect_all_blocks_free(*tiny, requests.size() + 1);
  EXPECT_GT(tiny->stats().preemptions_total, 0u);
}

// A 40-token "system prompt" shared by questions that diverge after it, one question asked
// twice and one prompt that stops inside the system prompt: with the prefix cache (together,
// and with a cache of 6 blocks so that cached blocks are evicted and reused) the greedy tokens
// are those computed without it.
TEST_F(EngineModelTest, PrefixCacheKeepsGreedyTokens) {
  const std::string system =
      "You are a helpful assistant for a logistics company. Answer briefly and politely, in "
      "plain English, and never invent tracking numbers or delivery dates. ";
  std::vector<GenerationRequest> requests;
  for (const char* question : {"Where is my parcel?", "How do I return an item?",
                               "Where is my parcel?", "What are your opening hours?"}) {
    requests.push_back(greedy(system + question, 6));
  }
  requests.push_back(greedy("You are a helpful assistant for a logistics", 6));
  ASSERT_GE(requests[0].prompt_tokens.size(), 32u);
  EngineConfig no_cache;
  no_cache.prefix_caching = false;
  auto reference_engine = make_engine(2048, no_cache);
  ASSERT_NE(reference_engine, nullptr);
  const auto reference = generate_all(*reference_engine, requests, /*together=*/false);

  auto engine = make_engine(2048);
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(generate_all(*engine, requests, /*together=*/false), reference);
  EngineStats stats = engine->stats();
  EXPECT_EQ(stats.prefix_cache_queries_total, requests.size());
  // The three questions after the first find at least one 16-token block of the system prompt.
  EXPECT_GE(stats.prefix_cache_hit_tokens_total, 16u * 3);
  EXPECT_EQ(generate_all(*engine, requests, /*together=*/true), reference);
  expect_all_blocks_free(*engine, 2 * requests.size());

  auto small = make_engine(96);
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(generate_all(*small, requests, /*together=*/false), reference);
  EXPECT_EQ(generate_all(*small, requests, /*together=*/true), reference);
  expect_all_blocks_free(*small, 2 * requests.size());
  EXPECT_GT(small->stats().prefix_cache_evictions_total, 0u);
}

// Hundreds of short requests from several threads, a quarter of them cancelled at random
// moments: every stream ends with exactly one finish event and every block is free after.
TEST_F(EngineModelTest, StressConcurrentRequestsWithCancellation) {
  EngineConfig config;
  config.max_running = 32;
  config.max_waiting = 1024;
  config.max_batch_tokens = 128;
  auto engine = make_engine(512, config);
  ASSERT_NE(engine, nullptr);
  const std::vector<std::string> prompts = {"Hi",      "The sky is", "Once upon a time",
                                            "2 + 2 =", "Paris is",   "Dogs"};
  constexpr int kThreads = 4;
  constexpr int kPerThread = 50;
  std::atomic<int> bad{0};
  std::atomic<int> finishes{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<uint32_t>(100 + t));
      std::vector<RequestHandle> handles;
      for (int i = 0; i < kPerThread; ++i) {
        GenerationRequest request =
            greedy(prompts[rng() % prompts.size()], 1 + static_cast<int32_t>(rng() % 3));
        if (rng() % 3 == 0) {
          request.sampling.temperature = 0.8f;
          request.sampling.seed = rng();
        }
        auto handle = engine->submit(std::move(request));
        if (!handle.is_ok()) {
          ++bad;
          continue;
        }
        handles.push_back(std::move(handle).value());
        if (rng() % 4 == 0) handles.back().cancel();
      }
      for (RequestHandle& handle : handles) {
        int n_finish = 0;
        while (auto event = handle.next(120s)) {
          if (event->kind == GenerationEvent::Kind::kFinish) {
            ++n_finish;
            if (event->finish_reason != FinishReason::kLength &&
                event->finish_reason != FinishReason::kCancelled) {
              ++bad;
            }
          }
        }
        if (n_finish != 1) ++bad;
        finishes += n_finish;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(finishes.load(), kThreads * kPerThread);
  expect_all_blocks_free(*engine, kThreads * kPerThread);
}

}  // namespace
}  // namespace llamaserve
