// Prefix caching through the whole Engine with the scripted executor, whose shadow KV cache
// makes any wrongly shared, stale or overwritten block change the output: many requests
// sharing and diverging prefixes give the same text with the cache as without, under
// chunking, eviction, preemption and cancellation.
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine_test_support.h"

namespace llamaserve {
namespace {

using namespace std::chrono_literals;
using testing::collect;
using testing::expect_all_blocks_free;
using testing::greedy_request;
using testing::Harness;

Harness make_engine(EngineConfig config, int32_t n_blocks) {
  return testing::make_engine(testing::context_hash, config, n_blocks, 4);
}

// Three "system prompts" of 9 to 30 bytes, each followed by questions that share some of
// their own bytes too, and a few requests that repeat a whole earlier prompt.
std::vector<GenerationRequest> shared_prefix_requests() {
  std::mt19937 rng(17);
  auto letters = [&](int n) {
    std::string text;
    for (int i = 0; i < n; ++i) text += static_cast<char>('a' + rng() % 26);
    return text;
  };
  const std::vector<std::string> systems = {letters(9), letters(16), letters(30)};
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 30; ++i) {
    std::string prompt = systems[rng() % systems.size()];
    prompt += rng() % 2 ? "qq" + letters(1 + static_cast<int>(rng() % 9)) : letters(3);
    requests.push_back(greedy_request(prompt, 2 + static_cast<int32_t>(rng() % 12)));
    if (i % 7 == 3) requests.push_back(requests[rng() % requests.size()]);
  }
  return requests;
}

std::vector<std::string> run_all(const std::vector<GenerationRequest>& requests,
                                 EngineConfig config, int32_t n_blocks, bool together,
                                 EngineStats* stats) {
  Harness h = make_engine(config, n_blocks);
  std::vector<std::string> texts = testing::run_texts(*h.engine, requests, together, h.executor);
  expect_all_blocks_free(*h.engine, requests.size());
  *stats = h.engine->stats();
  return texts;
}

TEST(EnginePrefixCache, SharedAndDivergingPrefixesGiveTheSameOutputs) {
  const std::vector<GenerationRequest> requests = shared_prefix_requests();
  EngineConfig off;
  off.prefix_caching = false;
  EngineStats stats;
  const std::vector<std::string> reference = run_all(requests, off, 256, false, &stats);
  EXPECT_EQ(stats.prefix_cache_queries_total, 0u);
  EXPECT_EQ(stats.prefix_cache_hit_tokens_total, 0u);

  // One by one: every request after the first of its system prompt finds that prompt.
  EXPECT_EQ(run_all(requests, {}, 256, false, &stats), reference);
  EXPECT_EQ(stats.prefix_cache_queries_total, requests.size());
  EXPECT_GT(stats.prefix_cache_hit_tokens_total, stats.prefix_cache_query_tokens_total / 3);
  EXPECT_EQ(stats.prefix_cache_evictions_total, 0u);

  // All at once, and with prompts cut into chunks of 5 tokens.
  EXPECT_EQ(run_all(requests, {}, 256, true, &stats), reference);
  EngineConfig chunked;
  chunked.max_batch_tokens = 5;
  EXPECT_EQ(run_all(requests, chunked, 256, true, &stats), reference);
  EXPECT_GT(stats.prefix_cache_hit_tokens_total, 0u);

  // A cache of 20 blocks (80 tokens) for 35 requests of up to 50 tokens: cached blocks are
  // evicted and reused for other contents, sequences are preempted and find their own blocks.
  EngineConfig tight;
  tight.max_batch_tokens = 16;
  EXPECT_EQ(run_all(requests, tight, 20, true, &stats), reference);
  EXPECT_GT(stats.prefix_cache_evictions_total, 0u);
  EXPECT_GT(stats.preemptions_total, 0u);
  EXPECT_GT(stats.prefix_cache_hit_tokens_total, 0u);
  EXPECT_EQ(run_all(requests, tight, 20, false, &stats), reference);
}

// Requests cancelled before, during and after their prefill leave only what was really
// computed in the cache: later requests with the same prompts still produce the reference.
TEST(EnginePrefixCache, CancellationsLeaveOnlyComputedBlocks) {
  const std::vector<GenerationRequest> requests = shared_prefix_requests();
  EngineConfig off;
  off.prefix_caching = false;
  EngineStats stats;
  const std::vector<std::string> reference = run_all(requests, off, 256, false, &stats);

  EngineConfig config;
  config.max_batch_tokens = 6;
  Harness h = make_engine(config, 40);
  h.executor->set_step_delay(1ms);
  std::mt19937 rng(3);
  std::vector<RequestHandle> cancelled;
  for (int round = 0; round < 3; ++round) {
    for (const auto& r : requests) {
      auto handle = h.engine->submit(r);
      ASSERT_TRUE(handle.is_ok()) << handle.status().to_string();
      cancelled.push_back(std::move(handle).value());
    }
    for (RequestHandle& handle : cancelled) {
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 1500));
      handle.cancel();
    }
    for (RequestHandle& handle : cancelled) EXPECT_EQ(collect(handle).n_finish, 1);
    cancelled.clear();
  }
  h.executor->set_step_delay(0ms);
  std::vector<RequestHandle> handles;
  for (const auto& r : requests) handles.push_back(std::move(h.engine->submit(r).value()));
  for (size_t i = 0; i < handles.size(); ++i) {
    EXPECT_EQ(collect(handles[i]).text, reference[i]) << "request " << i;
  }
  expect_all_blocks_free(*h.engine, 4 * requests.size());
  EXPECT_GT(h.engine->stats().prefix_cache_hit_tokens_total, 0u);
}

// The counters: two requests with the same 10-token prompt (blocks of 4): the second finds
// two blocks; its last block holds the prompt's last token, which is computed again.
TEST(EnginePrefixCache, CountsQueriesHitsAndCachedBlocks) {
  Harness h = make_engine({}, 64);
  const GenerationRequest request = greedy_request("abcdefghij", 3);
  for (int i = 0; i < 2; ++i) {
    auto handle = h.engine->submit(request);
    ASSERT_TRUE(handle.is_ok());
    EXPECT_EQ(collect(*handle).n_finish, 1);
  }
  expect_all_blocks_free(*h.engine, 2);
  const EngineStats stats = h.engine->stats();
  EXPECT_EQ(stats.prefix_cache_queries_total, 2u);
  EXPECT_EQ(stats.prefix_cache_query_tokens_total, 20u);
  EXPECT_EQ(stats.prefix_cache_hit_tokens_total, 8u);
  // 10 prompt + 2 computed generated tokens: three full blocks stay cached.
  EXPECT_EQ(stats.kv_blocks_cached, 3);
  EXPECT_EQ(stats.kv_blocks_free, stats.kv_blocks_total);
  EXPECT_NE(h.engine->describe().find("prefix caching on"), std::string::npos);
}

}  // namespace
}  // namespace llamaserve
