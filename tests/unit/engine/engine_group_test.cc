// EngineGroup with real CPU executors (one thread per replica) and the real SmolLM2-135M
// model: routing to the least-loaded replica, greedy output equal to a single engine, drain
// and shutdown ending every request, summed stats, and a free KV cache after a load with
// cancellations. Skipped when the model file is absent.
#include "engine/engine_group.h"

#include <filesystem>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "engine/generate.h"
#include "executor/cpu_executor.h"
#include "model/weights.h"
#include "smollm2_engine_test.h"
#include "tokenizer/tokenizer.h"

namespace llamaserve {
namespace {

using namespace std::chrono_literals;

class EngineGroupTest : public testing::SmolLm2EngineTest {
 protected:
  // One thread per replica: the replicas of a group share the machine's cores.
  static std::unique_ptr<Engine> make_engine(int64_t kv_tokens, EngineConfig config = {},
                                             std::shared_ptr<const Tokenizer> tokenizer = {}) {
    return SmolLm2EngineTest::make_engine(kv_tokens, config, 1, std::move(tokenizer));
  }

  static std::unique_ptr<EngineGroup> make_group(int n_replicas, int64_t kv_tokens,
                                                 EngineConfig config = {}) {
    std::vector<std::unique_ptr<Engine>> replicas;
    for (int i = 0; i < n_replicas; ++i) replicas.push_back(make_engine(kv_tokens, config));
    auto group = EngineGroup::create(std::move(replicas));
    EXPECT_TRUE(group.is_ok()) << group.status().to_string();
    return group.is_ok() ? std::move(group).value() : nullptr;
  }

  struct Outcome {
    std::vector<int32_t> tokens;
    int n_finish = 0;
    FinishReason finish_reason = FinishReason::kNone;
    Status error;
  };

  static Outcome read_all(RequestHandle& handle) {
    Outcome outcome;
    while (auto event = handle.next(120s)) {
      outcome.tokens.insert(outcome.tokens.end(), event->tokens.begin(), event->tokens.end());
      if (event->kind == GenerationEvent::Kind::kFinish) {
        ++outcome.n_finish;
        outcome.finish_reason = event->finish_reason;
        outcome.error = event->error;
      }
    }
    return outcome;
  }

  static std::vector<GenerationRequest> sample_requests() {
    return {greedy("The capital of France is a city that is famous for its", 6),
            greedy("1, 2, 3, 4, 5, 6,", 4),
            greedy("Write a short poem about the sea. The waves", 6),
            greedy("def fibonacci(n):", 8)};
  }

  // Waits until the stats of every replica are published with `n_finished` requests and
  // every KV block free.
  static void expect_all_blocks_free(const EngineGroup& group, uint64_t n_finished) {
    for (int i = 0; i < 400; ++i) {
      EngineStats stats = group.stats();
      if (stats.requests_finished >= n_finished && stats.kv_blocks_free == stats.kv_blocks_total)
        break;
      std::this_thread::sleep_for(5ms);
    }
    EngineStats stats = group.stats();
    EXPECT_EQ(stats.requests_finished, n_finished);
    EXPECT_EQ(stats.kv_blocks_free, stats.kv_blocks_total);
    for (size_t r = 0; r < group.size(); ++r) {
      EngineStats replica = group.replica_stats(r);
      EXPECT_EQ(replica.kv_blocks_free, replica.kv_blocks_total) << "replica " << r;
      EXPECT_EQ(group.replica_open_requests(r), 0) << "replica " << r;
    }
  }
};

TEST_F(EngineGroupTest, CreateRefusesEmptyNullAndForeignTokenizers) {
  auto empty = EngineGroup::create({});
  ASSERT_FALSE(empty.is_ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);

  std::vector<std::unique_ptr<Engine>> with_null;
  with_null.push_back(make_engine(256));
  with_null.push_back(nullptr);
  auto null_replica = EngineGroup::create(std::move(with_null));
  ASSERT_FALSE(null_replica.is_ok());
  EXPECT_NE(null_replica.status().message().find("replica 1"), std::string::npos);

  auto other_tokenizer = Tokenizer::from_gguf(*model_->file);
  ASSERT_TRUE(other_tokenizer.is_ok());
  std::vector<std::unique_ptr<Engine>> mixed;
  mixed.push_back(make_engine(256));
  mixed.push_back(
      make_engine(256, {}, std::make_shared<const Tokenizer>(std::move(other_tokenizer).value())));
  auto foreign = EngineGroup::create(std::move(mixed));
  ASSERT_FALSE(foreign.is_ok());
  EXPECT_NE(foreign.status().message().find("tokenizer"), std::string::npos)
      << foreign.status().message();
}

// One replica is the engine itself: same description, same context, same stats.
TEST_F(EngineGroupTest, OneReplicaIsTheEngine) {
  auto engine = make_engine(512);
  ASSERT_NE(engine, nullptr);
  const std::string description = engine->describe();
  const int32_t context = engine->max_context();
  std::vector<std::unique_ptr<Engine>> replicas;
  replicas.push_back(std::move(engine));
  auto group = EngineGroup::create(std::move(replicas));
  ASSERT_TRUE(group.is_ok()) << group.status().to_string();
  EXPECT_EQ((*group)->size(), 1u);
  EXPECT_EQ((*group)->describe(), description);
  EXPECT_EQ((*group)->max_context(), context);
  auto handle = (*group)->submit(greedy("Hello there", 3));
  ASSERT_TRUE(handle.is_ok()) << handle.status().to_string();
  Outcome completion = read_all(*handle);
  EXPECT_EQ(completion.n_finish, 1);
  EXPECT_EQ(completion.tokens.size(), 3u);
  expect_all_blocks_free(**group, 1);
  EngineStats total = (*group)->stats();
  EngineStats replica = (*group)->replica_stats(0);
  EXPECT_EQ(total.generated_tokens_total, 3u);
  EXPECT_EQ(total.generated_tokens_total, replica.generated_tokens_total);
  EXPECT_EQ(total.steps_total, replica.steps_total);
  EXPECT_EQ(total.kv_blocks_total, replica.kv_blocks_total);
}

// With two replicas, two long requests submitted back to back run on different replicas; a
// third goes to replica 0 (a tie) and a fourth to replica 1.
TEST_F(EngineGroupTest, LeastLoadedRouting) {
  auto group = make_group(2, 512);
  ASSERT_NE(group, nullptr);
  EXPECT_NE(group->describe().find("2 replicas: [0] "), std::string::npos) << group->describe();
  std::vector<RequestHandle> handles;
  const std::vector<std::pair<int32_t, int32_t>> expected_open = {{1, 0}, {1, 1}, {2, 1}, {2, 2}};
  for (const auto& [open_0, open_1] : expected_open) {
    auto handle = group->submit(greedy("Tell me a long story about a dragon.", 48));
    ASSERT_TRUE(handle.is_ok()) << handle.status().to_string();
    handles.push_back(std::move(handle).value());
    // 48 tokens take far longer than a submission: nothing has finished yet.
    EXPECT_EQ(group->replica_open_requests(0), open_0);
    EXPECT_EQ(group->replica_open_requests(1), open_1);
  }
  std::vector<std::vector<int32_t>> outputs;
  for (RequestHandle& handle : handles) {
    Outcome outcome = read_all(handle);
    EXPECT_EQ(outcome.finish_reason, FinishReason::kLength) << outcome.error.to_string();
    outputs.push_back(outcome.tokens);
  }
  for (const auto& output : outputs) EXPECT_EQ(output, outputs.front());
  expect_all_blocks_free(*group, 4);
  for (size_t r = 0; r < 2; ++r) {
    EngineStats stats = group->replica_stats(r);
    EXPECT_EQ(stats.requests_finished, 2u) << "replica " << r;
    EXPECT_EQ(stats.generated_tokens_total, 2u * 48) << "replica " << r;
  }

  // submit_to() bypasses the router: both requests land on replica 1.
  std::vector<RequestHandle> pinned;
  for (int i = 0; i < 2; ++i) {
    auto handle = group->submit_to(1, greedy("Hello", 4));
    ASSERT_TRUE(handle.is_ok()) << handle.status().to_string();
    pinned.push_back(std::move(handle).value());
  }
  for (RequestHandle& handle : pinned) EXPECT_EQ(read_all(handle).tokens.size(), 4u);
  expect_all_blocks_free(*group, 6);
  EXPECT_EQ(group->replica_stats(0).requests_finished, 2u);
  EXPECT_EQ(group->replica_stats(1).requests_finished, 4u);
}

// Requests spread over two replicas produce the tokens each produces alone on one engine.
TEST_F(EngineGroupTest, GreedyOutputEqualsASingleEngine) {
  const std::vector<GenerationRequest> requests = sample_requests();
  std::vector<std::vector<int32_t>> alone;
  {
    auto engine = make_engine(1024);
    ASSERT_NE(engine, nullptr);
    for (const GenerationRequest& request : requests) {
      auto completion = generate(*engine, request);
      ASSERT_TRUE(completion.is_ok()) << completion.status().to_string();
      ASSERT_EQ(completion->finish_reason, FinishReason::kLength);
      alone.push_back(completion->tokens);
    }
  }
  auto group = make_group(2, 1024);
  ASSERT_NE(group, nullptr);
  std::vector<RequestHandle> handles;
  for (const GenerationRequest& request : requests) {
    auto handle = group->submit(request);
    ASSERT_TRUE(handle.is_ok()) << handle.status().to_string();
    handles.push_back(std::move(handle).value());
  }
  for (size_t i = 0; i < handles.size(); ++i) {
    Outcome outcome = read_all(handles[i]);
    EXPECT_EQ(outcome.finish_reason, FinishReason::kLength) << outcome.error.to_string();
    EXPECT_EQ(outcome.tokens, alone[i]) << "request " << i;
  }
  expect_all_blocks_free(*group, requests.size());
  EXPECT_GT(group->replica_stats(0).requests_finished, 0u);
  EXPECT_GT(group->replica_stats(1).requests_finished, 0u);

  // The summed stats are the replicas' stats added up, field by field.
  EngineStats total = group->stats();
  EngineStats r0 = group->replica_stats(0);
  EngineStats r1 = group->replica_stats(1);
  EXPECT_EQ(total.kv_blocks_total, r0.kv_blocks_total + r1.kv_blocks_total);
  EXPECT_EQ(total.kv_blocks_free, r0.kv_blocks_free + r1.kv_blocks_free);
  EXPECT_EQ(total.requests_finished, r0.requests_finished + r1.requests_finished);
  EXPECT_EQ(total.prompt_tokens_total, r0.prompt_tokens_total + r1.prompt_tokens_total);
  EXPECT_EQ(total.generated_tokens_total, r0.generated_tokens_total + r1.generated_tokens_total);
  EXPECT_EQ(total.steps_total, r0.steps_total + r1.steps_total);
  EXPECT_EQ(total.waiting + total.running, 0);
  uint64_t prompt_tokens = 0;
  uint64_t generated = 0;
  for (const GenerationRequest& request : requests) {
    prompt_tokens += request.prompt_tokens.size();
    generated += static_cast<uint64_t>(request.max_new_tokens);
  }
  EXPECT_EQ(total.prompt_tokens_total, prompt_tokens);
  EXPECT_EQ(total.generated_tokens_total, generated);
}

// drain() waits for the requests of every replica, then refuses new ones.
TEST_F(EngineGroupTest, DrainFinishesEveryRequest) {
  auto group = make_group(2, 512);
  ASSERT_NE(group, nullptr);
  std::vector<RequestHandle> handles;
  for (int i = 0; i < 4; ++i) {
    auto handle = group->submit(greedy("Count: one, two, three,", 6));
    ASSERT_TRUE(handle.is_ok()) << handle.status().to_string();
    handles.push_back(std::move(handle).value());
  }
  Status drained = group->drain(120s);
  EXPECT_TRUE(drained.is_ok()) << drained.to_string();
  for (RequestHandle& handle : handles) {
    Outcome outcome = read_all(handle);
    EXPECT_EQ(outcome.n_finish, 1);
    EXPECT_EQ(outcome.finish_reason, FinishReason::kLength);
    EXPECT_EQ(outcome.tokens.size(), 6u);
  }
  auto refused = group->submit(greedy("Hello", 2));
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
  expect_all_blocks_free(*group, 4);
}

// A drain that times out cancels what is left on every replica and names them.
TEST_F(EngineGroupTest, DrainTimeoutCancelsOnEveryReplica) {
  auto group = make_group(2, 512);
  ASSERT_NE(group, nullptr);
  std::vector<RequestHandle> handles;
  for (int i = 0; i < 2; ++i) {
    auto handle = group->submit(greedy("Tell me a long story about a dragon.", 200));
    ASSERT_TRUE(handle.is_ok()) << handle.status().to_string();
    handles.push_back(std::move(handle).value());
  }
  Status drained = group->drain(1ms);
  EXPECT_EQ(drained.code(), StatusCode::kDeadlineExceeded) << drained.to_string();
  EXPECT_NE(drained.message().find("replica 0: "), std::string::npos) << drained.message();
  EXPECT_NE(drained.message().find("replica 1: "), std::string::npos) << drained.message();
  for (RequestHandle& handle : handles) {
    Outcome outcome = read_all(handle);
    EXPECT_EQ(outcome.n_finish, 1);
    EXPECT_EQ(outcome.finish_reason, FinishReason::kCancelled);
  }
  expect_all_blocks_free(*group, 2);
}

// shutdown() ends every open request of every replica with kCancelled / kUnavailable.
TEST_F(EngineGroupTest, ShutdownEndsEveryRequest) {
  auto group = make_group(2, 512);
  ASSERT_NE(group, nullptr);
  std::vector<RequestHandle> handles;
  for (int i = 0; i < 4; ++i) {
    auto handle = group->submit(greedy("Tell me a long story about a dragon.", 200));
    ASSERT_TRUE(handle.is_ok()) << handle.status().to_string();
    handles.push_back(std::move(handle).value());
  }
  group->shutdown();
  group->shutdown();  // idempotent
  for (RequestHandle& handle : handles) {
    Outcome outcome = read_all(handle);
    EXPECT_EQ(outcome.n_finish, 1);
    EXPECT_EQ(outcome.finish_reason, FinishReason::kCancelled);
    EXPECT_EQ(outcome.error.code(), StatusCode::kUnavailable) << outcome.error.to_string();
  }
  auto refused = group->submit(greedy("Hello", 2));
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
}

// When the least-loaded replica's queue is full the request goes to the next one, and only
// when every queue is full is it refused. Replica 0 runs one sequence and queues one more;
// replica 1 runs four.
TEST_F(EngineGroupTest, FullQueuePassesToTheNextReplica) {
  EngineConfig small;
  small.max_running = 1;
  small.max_waiting = 1;
  EngineConfig larger;
  larger.max_running = 4;
  larger.max_waiting = 1;
  std::vector<std::unique_ptr<Engine>> replicas;
  replicas.push_back(make_engine(512, small));
  replicas.push_back(make_engine(2048, larger));
  auto created = EngineGroup::create(std::move(replicas));
  ASSERT_TRUE(created.is_ok()) << created.status().to_string();
  EngineGroup& group = **created;

  std::vector<RequestHandle> handles;
  auto submit_long = [&] {
    auto handle = group.submit(greedy("Tell me a long story about a dragon.", 200));
    if (handle.is_ok()) handles.push_back(std::move(handle).value());
    return handle.status();
  };
  auto wait_running = [&](size_t replica, int32_t running) {
    for (int i = 0; i < 2000 && group.replica_stats(replica).running < running; ++i) {
      std::this_thread::sleep_for(1ms);
    }
    ASSERT_EQ(group.replica_stats(replica).running, running) << "replica " << replica;
  };
  ASSERT_TRUE(submit_long().is_ok());  // replica 0 (a tie)
  wait_running(0, 1);
  ASSERT_TRUE(submit_long().is_ok());  // replica 1
  wait_running(1, 1);
  ASSERT_TRUE(submit_long().is_ok());  // replica 0 (a tie again): queued behind the first
  ASSERT_TRUE(submit_long().is_ok());  // replica 1
  wait_running(1, 2);
  EXPECT_EQ(group.replica_open_requests(0), 2);
  EXPECT_EQ(group.replica_open_requests(1), 2);
  // A tie: replica 0 comes first, but its queue is full, so replica 1 takes it.
  ASSERT_TRUE(submit_long().is_ok());
  EXPECT_EQ(group.replica_open_requests(0), 2);
  EXPECT_EQ(group.replica_open_requests(1), 3);
  // Replica 1 runs it (its queue empties), so the same happens once more; then replica 1's
  // queue is full too.
  wait_running(1, 3);
  ASSERT_TRUE(submit_long().is_ok());
  EXPECT_EQ(group.replica_open_requests(1), 4);
  wait_running(1, 4);
  ASSERT_TRUE(submit_long().is_ok());  // replica 1's queue (running is at its limit)
  EXPECT_EQ(group.replica_open_requests(1), 5);
  Status refused = submit_long();
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused.to_string();
  EXPECT_NE(refused.message().find("every replica"), std::string::npos) << refused.message();

  for (RequestHandle& handle : handles) handle.cancel();
  for (RequestHandle& handle : handles) EXPECT_EQ(read_all(handle).n_finish, 1);
  expect_all_blocks_free(group, handles.size());
}

// Many short requests from several threads over two replicas, a quarter cancelled at random:
// every stream ends once, and every KV block of every replica is free afterwards.
TEST_F(EngineGroupTest, LoadWithCancellationsFreesEveryBlock) {
  EngineConfig config;
  config.max_running = 16;
  config.max_waiting = 512;
  config.max_batch_tokens = 128;
  auto group = make_group(2, 256, config);
  ASSERT_NE(group, nullptr);
  const std::vector<std::string> prompts = {"Hi", "The sky is", "Once upon a time", "2 + 2 ="};
  constexpr int kThreads = 3;
  constexpr int kPerThread = 24;
  std::atomic<int> bad{0};
  std::atomic<int> finishes{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<uint32_t>(7 + t));
      std::vector<RequestHandle> handles;
      for (int i = 0; i < kPerThread; ++i) {
        GenerationRequest request =
            greedy(prompts[rng() % prompts.size()], 1 + static_cast<int32_t>(rng() % 4));
        auto handle = group->submit(std::move(request));
        if (!handle.is_ok()) {
          ++bad;
          continue;
        }
        handles.push_back(std::move(handle).value());
        if (rng() % 4 == 0) handles.back().cancel();
      }
      for (RequestHandle& handle : handles) {
        Outcome outcome = read_all(handle);
        if (outcome.n_finish != 1 || (outcome.finish_reason != FinishReason::kLength &&
                                      outcome.finish_reason != FinishReason::kCancelled)) {
          ++bad;
        }
        finishes += outcome.n_finish;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(finishes.load(), kThreads * kPerThread);
  expect_all_blocks_free(*group, kThreads * kPerThread);
  EXPECT_GT(group->replica_stats(0).requests_finished, 0u);
  EXPECT_GT(group->replica_stats(1).requests_finished, 0u);
}

}  // namespace
}  // namespace llamaserve
