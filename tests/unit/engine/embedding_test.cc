// Embedding requests through the real Engine and CPU executor on the tiny fixture model
// (tests/fixtures/reference/tiny-llama-f16.gguf, with its own tokenizer): pooling against the
// executor's hidden rows computed by hand, several inputs in one pass equal to one at a time,
// chunked long inputs equal to one pass, unit length, generations running alongside unchanged,
// validation, cancellation, drain and shutdown with queued embeddings, the KV blocks all free
// afterwards, and EngineGroup routing. The batcher's planning is covered on its own at the end.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <thread>

#include "engine/embedding_batcher.h"
#include "engine/engine.h"
#include "engine/engine_group.h"
#include "engine/generate.h"
#include "executor/cpu_executor.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace llamaserve {
namespace {

using namespace std::chrono_literals;

constexpr const char* kModelPath =
    LLAMASERVE_SOURCE_DIR "/tests/fixtures/reference/tiny-llama-f16.gguf";

struct Outcome {
  FinishReason reason = FinishReason::kNone;
  Status error;
  std::vector<float> vectors;
  Usage usage;
  int n_events = 0;
};

Outcome wait(RequestHandle& handle) {
  Outcome outcome;
  while (auto event = handle.next(120s)) {
    ++outcome.n_events;
    if (event->kind != GenerationEvent::Kind::kFinish) continue;
    outcome.reason = event->finish_reason;
    outcome.error = event->error;
    outcome.vectors = std::move(event->embeddings);
    outcome.usage = event->usage;
  }
  return outcome;
}

double cosine(std::span<const float> a, std::span<const float> b) {
  double dot = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return dot / std::sqrt(aa * bb);
}

// Deterministic ids of the tiny model's vocabulary (384), past its special tokens.
std::vector<int32_t> ids(size_t n, int32_t salt) {
  std::vector<int32_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(3 + (i * 7919 + salt * 131) % 380);
  return out;
}

// An executor that hides forward_hidden, as a multi-GPU one does.
class NoHiddenExecutor final : public Executor {
 public:
  explicit NoHiddenExecutor(std::unique_ptr<Executor> inner) : inner_(std::move(inner)) {}
  const ModelConfig& config() const override { return inner_->config(); }
  KvCacheInfo kv_info() const override { return inner_->kv_info(); }
  std::string describe() const override { return "no hidden states"; }
  Status forward(const Batch& batch, std::span<float> logits) override {
    return inner_->forward(batch, logits);
  }

 private:
  std::unique_ptr<Executor> inner_;
};

class EmbeddingEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto model = load_model(kModelPath);
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();
    model_ = std::move(model).value();
    auto tokenizer = Tokenizer::from_gguf(*model_->file);
    ASSERT_TRUE(tokenizer.is_ok()) << tokenizer.status().to_string();
    tokenizer_ = std::make_shared<const Tokenizer>(std::move(tokenizer).value());
  }
  static void TearDownTestSuite() {
    tokenizer_.reset();
    model_.reset();
  }

  static std::unique_ptr<Executor> make_executor(int64_t kv_tokens = 2048) {
    CpuExecutorOptions options;
    options.threads = 2;
    options.kv_capacity_tokens = kv_tokens;
    auto executor = create_cpu_executor(model_, options);
    EXPECT_TRUE(executor.is_ok()) << executor.status().to_string();
    return executor.is_ok() ? std::move(executor).value() : nullptr;
  }

  static std::unique_ptr<Engine> make_engine(EngineConfig config = {}, int64_t kv_tokens = 2048) {
    auto engine = Engine::create(make_executor(kv_tokens), tokenizer_, config);
    EXPECT_TRUE(engine.is_ok()) << engine.status().to_string();
    return engine.is_ok() ? std::move(engine).value() : nullptr;
  }

  static EmbeddingRequest request(std::vector<std::vector<int32_t>> inputs,
                                  EmbeddingPooling pooling = EmbeddingPooling::kMean) {
    EmbeddingRequest r;
    r.inputs = std::move(inputs);
    r.pooling = pooling;
    return r;
  }

  static Outcome embed(Engine& engine, EmbeddingRequest r) {
    auto handle = engine.submit_embedding(std::move(r));
    EXPECT_TRUE(handle.is_ok()) << handle.status().to_string();
    if (!handle.is_ok()) return {};
    return wait(*handle);
  }

  // Waits until the engine has published a step that counts `n_finished` requests finished
  // and has none open. The stats are published after a pass delivers its outputs, so the
  // snapshot a caller reads right after its last event may still be the one from before its
  // request: an idle snapshot alone does not tell them apart.
  static EngineStats settled(Engine& engine, uint64_t n_finished) {
    for (int i = 0; i < 2500; ++i) {
      const EngineStats stats = engine.stats();
      if (stats.requests_finished >= n_finished && engine.open_requests() == 0 &&
          stats.running == 0 && stats.waiting == 0 &&
          stats.kv_blocks_free == stats.kv_blocks_total) {
        return stats;
      }
      std::this_thread::sleep_for(2ms);
    }
    const EngineStats stats = engine.stats();
    EXPECT_EQ(stats.requests_finished, n_finished);
    return stats;
  }

  static int64_t n_embd() { return model_->config.n_embd; }

  inline static std::shared_ptr<const LoadedModel> model_;
  inline static std::shared_ptr<const Tokenizer> tokenizer_;
};

TEST_F(EmbeddingEngineTest, PoolsTheExecutorsFinalNormedRows) {
  const std::vector<int32_t> input = ids(37, 1);
  // Every row's hidden state, by hand, from a separate executor.
  auto executor = make_executor();
  Batch batch;
  for (size_t i = 0; i < input.size(); ++i) {
    batch.tokens.push_back(input[i]);
    batch.positions.push_back(static_cast<int32_t>(i));
    batch.seq_index.push_back(0);
    batch.logit_rows.push_back(static_cast<int32_t>(i));
  }
  batch.blocks_per_seq = 3;
  batch.block_tables = {0, 1, 2};
  batch.seq_lengths = {static_cast<int32_t>(input.size())};
  std::vector<float> hidden(input.size() * n_embd());
  ASSERT_TRUE(executor->forward_hidden(batch, hidden).is_ok());
  std::vector<float> mean(n_embd(), 0.0f), last(hidden.end() - n_embd(), hidden.end());
  for (size_t r = 0; r < input.size(); ++r) {
    for (int64_t c = 0; c < n_embd(); ++c) mean[c] += hidden[r * n_embd() + c] / input.size();
  }
  l2_normalize(mean);
  l2_normalize(last);

  auto engine = make_engine();
  const Outcome by_mean = embed(*engine, request({input}, EmbeddingPooling::kMean));
  const Outcome by_last = embed(*engine, request({input}, EmbeddingPooling::kLast));
  ASSERT_EQ(by_mean.reason, FinishReason::kStop) << by_mean.error.to_string();
  ASSERT_EQ(by_last.reason, FinishReason::kStop) << by_last.error.to_string();
  EXPECT_EQ(by_mean.n_events, 1);
  EXPECT_EQ(by_mean.usage.prompt_tokens, 37);
  ASSERT_EQ(by_mean.vectors.size(), static_cast<size_t>(n_embd()));
  for (int64_t c = 0; c < n_embd(); ++c) {
    EXPECT_NEAR(by_mean.vectors[c], mean[c], 1e-5) << c;
    EXPECT_NEAR(by_last.vectors[c], last[c], 1e-5) << c;
  }
  EXPECT_LT(cosine(by_mean.vectors, by_last.vectors), 0.999);  // the poolings differ
}

TEST_F(EmbeddingEngineTest, BatchedEqualsOneAtATimeAndUnitLength) {
  const std::vector<std::vector<int32_t>> inputs = {ids(5, 1), ids(33, 2), ids(1, 3), ids(70, 4),
                                                    ids(16, 5)};
  auto engine = make_engine();
  const Outcome together = embed(*engine, request(inputs));
  ASSERT_EQ(together.reason, FinishReason::kStop) << together.error.to_string();
  ASSERT_EQ(together.vectors.size(), inputs.size() * n_embd());
  EXPECT_EQ(together.usage.prompt_tokens, 5 + 33 + 1 + 70 + 16);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Outcome alone = embed(*engine, request({inputs[i]}));
    ASSERT_EQ(alone.reason, FinishReason::kStop);
    const std::span<const float> row(together.vectors.data() + i * n_embd(), n_embd());
    EXPECT_NEAR(std::sqrt(std::inner_product(row.begin(), row.end(), row.begin(), 0.0)), 1.0, 1e-5);
    EXPECT_GE(cosine(row, alone.vectors), 0.99999) << "input " << i;
  }
  const EngineStats stats = settled(*engine, 1 + inputs.size());
  EXPECT_EQ(stats.kv_blocks_free, stats.kv_blocks_total);
}

TEST_F(EmbeddingEngineTest, ChunkedLongInputEqualsOnePass) {
  const std::vector<int32_t> input = ids(150, 9);
  EngineConfig small;
  small.max_batch_tokens = 16;  // ten passes, the pooled sum carried across them
  auto chunked = make_engine(small);
  auto whole = make_engine();
  for (EmbeddingPooling pooling : {EmbeddingPooling::kMean, EmbeddingPooling::kLast}) {
    const Outcome a = embed(*chunked, request({input, ids(3, 1)}, pooling));
    const Outcome b = embed(*whole, request({input, ids(3, 1)}, pooling));
    ASSERT_EQ(a.reason, FinishReason::kStop) << a.error.to_string();
    ASSERT_EQ(b.reason, FinishReason::kStop) << b.error.to_string();
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_GE(cosine(std::span(a.vectors).subspan(i * n_embd(), n_embd()),
                       std::span(b.vectors).subspan(i * n_embd(), n_embd())),
                0.99999)
          << embedding_pooling_name(pooling) << " input " << i;
    }
  }
  // The stats are published after a pass delivers its outputs: read them once settled.
  const EngineStats after = settled(*chunked, 2);
  EXPECT_GE(after.steps_total, 20u);
  EXPECT_EQ(after.kv_blocks_free, after.kv_blocks_total);
}

TEST_F(EmbeddingEngineTest, GenerationsAlongsideAreUnchanged) {
  auto make_generation = [](int32_t salt) {
    GenerationRequest r;
    r.prompt_tokens = ids(20, salt);
    r.max_new_tokens = 24;
    r.sampling.temperature = 0.0f;
    r.ignore_eos = true;
    return r;
  };
  auto engine = make_engine();
  std::vector<std::vector<int32_t>> alone;
  for (int32_t salt : {11, 12}) {
    auto result = generate(*engine, make_generation(salt));
    ASSERT_TRUE(result.is_ok()) << result.status().to_string();
    alone.push_back(result->tokens);
  }
  const Outcome reference = embed(*engine, request({ids(90, 13), ids(7, 14)}));
  const uint64_t prompt_tokens_before = settled(*engine, 3).prompt_tokens_total;

  std::vector<RequestHandle> generations, embeddings;
  for (int32_t salt : {11, 12})
    generations.push_back(engine->submit(make_generation(salt)).value());
  for (int i = 0; i < 4; ++i) {
    embeddings.push_back(engine->submit_embedding(request({ids(90, 13), ids(7, 14)})).value());
  }
  for (size_t i = 0; i < generations.size(); ++i) {
    std::vector<int32_t> tokens;
    while (auto event = generations[i].next(120s)) {
      tokens.insert(tokens.end(), event->tokens.begin(), event->tokens.end());
    }
    EXPECT_EQ(tokens, alone[i]) << "generation " << i;
  }
  for (RequestHandle& handle : embeddings) {
    const Outcome outcome = wait(handle);
    ASSERT_EQ(outcome.reason, FinishReason::kStop);
    EXPECT_GE(cosine(outcome.vectors, reference.vectors), 0.99999);
  }
  const EngineStats stats = settled(*engine, 3 + 6);
  EXPECT_EQ(stats.prompt_tokens_total - prompt_tokens_before, 2u * 20 + 4u * 97);
  EXPECT_EQ(stats.kv_blocks_free, stats.kv_blocks_total);
}

TEST_F(EmbeddingEngineTest, RefusesBadRequests) {
  EngineConfig config;
  config.max_context = 64;
  auto engine = make_engine(config);
  auto code = [&](EmbeddingRequest r) {
    auto handle = engine->submit_embedding(std::move(r));
    return handle.is_ok() ? StatusCode::kOk : handle.status().code();
  };
  EXPECT_EQ(code(request({})), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(request({ids(3, 1), {}})), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(request({{1, 2, 384}})), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(request({{-1}})), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(request({ids(65, 1)})), StatusCode::kOutOfRange);
  EmbeddingRequest negative = request({ids(3, 1)});
  negative.timeout = -1ms;
  EXPECT_EQ(code(negative), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(request({ids(64, 1)})), StatusCode::kOk);

  auto hidden_less = Engine::create(std::make_unique<NoHiddenExecutor>(make_executor()), tokenizer_,
                                    EngineConfig{});
  ASSERT_TRUE(hidden_less.is_ok());
  EXPECT_FALSE((*hidden_less)->embeddings_supported());
  auto refused = (*hidden_less)->submit_embedding(request({ids(3, 1)}));
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnsupported);
}

TEST_F(EmbeddingEngineTest, CancellationQueueLimitAndShutdown) {
  EngineConfig config;
  config.max_batch_tokens = 8;  // many passes per request
  config.max_waiting = 3;
  auto engine = make_engine(config);
  auto first = engine->submit_embedding(request({ids(200, 1), ids(200, 2)}));
  auto second = engine->submit_embedding(request({ids(200, 3)}));
  ASSERT_TRUE(first.is_ok() && second.is_ok());
  second->cancel();
  const Outcome cancelled = wait(*second);
  EXPECT_EQ(cancelled.reason, FinishReason::kCancelled);
  EXPECT_TRUE(cancelled.vectors.empty());
  EXPECT_EQ(wait(*first).reason, FinishReason::kStop);
  EXPECT_EQ(settled(*engine, 2).kv_blocks_free, engine->stats().kv_blocks_total);

  // Submissions until the queue is full (max_waiting not yet started; the engine may start
  // one meanwhile), then shutdown: every request ends, cancelled as unavailable.
  std::vector<RequestHandle> queued;
  Status refused;
  for (int i = 0; i < 10 && refused.is_ok(); ++i) {
    auto handle = engine->submit_embedding(request({ids(300, i)}));
    if (handle.is_ok()) {
      queued.push_back(std::move(handle).value());
    } else {
      refused = handle.status();
    }
  }
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted);
  EXPECT_GE(queued.size(), 3u);
  engine->shutdown();
  for (RequestHandle& handle : queued) {
    const Outcome outcome = wait(handle);
    EXPECT_EQ(outcome.n_events, 1);
    if (outcome.reason != FinishReason::kStop) {
      EXPECT_EQ(outcome.reason, FinishReason::kCancelled);
      EXPECT_EQ(outcome.error.code(), StatusCode::kUnavailable);
    }
  }
  EXPECT_EQ(engine->open_requests(), 0);
  EXPECT_EQ(engine->submit_embedding(request({ids(3, 1)})).status().code(),
            StatusCode::kUnavailable);
}

TEST_F(EmbeddingEngineTest, DrainCancelsWhatRunsPastItsTimeout) {
  EngineConfig config;
  config.max_batch_tokens = 4;
  auto engine = make_engine(config);
  std::vector<RequestHandle> handles;
  for (int i = 0; i < 3; ++i)
    handles.push_back(engine->submit_embedding(request({ids(400, i)})).value());
  const Status drained = engine->drain(1ms);
  EXPECT_EQ(drained.code(), StatusCode::kDeadlineExceeded);
  for (RequestHandle& handle : handles) {
    const Outcome outcome = wait(handle);
    EXPECT_TRUE(outcome.reason == FinishReason::kCancelled ||
                outcome.reason == FinishReason::kStop);
  }
  EXPECT_EQ(settled(*engine, 3).kv_blocks_free, engine->stats().kv_blocks_total);
}

TEST_F(EmbeddingEngineTest, QueueTimeoutWhenBlocksAreTaken) {
  // The cache holds 64 tokens: a generation of 60 keeps an input of 40 waiting.
  EngineConfig config;
  auto engine = make_engine(config, 64);
  GenerationRequest generation;
  generation.prompt_tokens = ids(20, 1);
  generation.max_new_tokens = 40;
  generation.sampling.temperature = 0.0f;
  generation.ignore_eos = true;
  auto running = engine->submit(std::move(generation));
  ASSERT_TRUE(running.is_ok());
  EmbeddingRequest r = request({ids(40, 2)});
  r.queue_timeout = 1ms;
  auto handle = engine->submit_embedding(std::move(r));
  ASSERT_TRUE(handle.is_ok());
  const Outcome outcome = wait(*handle);
  // Either it waited past its queue timeout, or the generation finished first.
  if (outcome.reason != FinishReason::kStop) {
    EXPECT_EQ(outcome.reason, FinishReason::kTimeout);
    EXPECT_EQ(outcome.error.code(), StatusCode::kDeadlineExceeded);
  }
  while (running->next(120s)) {
  }
  EXPECT_EQ(settled(*engine, 2).kv_blocks_free, engine->stats().kv_blocks_total);
}

TEST_F(EmbeddingEngineTest, GroupRoutesEmbeddings) {
  std::vector<std::unique_ptr<Engine>> replicas;
  replicas.push_back(make_engine());
  replicas.push_back(make_engine());
  auto group = EngineGroup::create(std::move(replicas));
  ASSERT_TRUE(group.is_ok());
  EXPECT_TRUE((*group)->embeddings_supported());
  auto single = make_engine();
  const Outcome reference = embed(*single, request({ids(30, 5)}));
  std::vector<RequestHandle> handles;
  for (int i = 0; i < 4; ++i) {
    auto handle = (*group)->submit_embedding(request({ids(30, 5)}));
    ASSERT_TRUE(handle.is_ok()) << handle.status().to_string();
    handles.push_back(std::move(handle).value());
  }
  for (RequestHandle& handle : handles) {
    const Outcome outcome = wait(handle);
    ASSERT_EQ(outcome.reason, FinishReason::kStop);
    EXPECT_GE(cosine(outcome.vectors, reference.vectors), 0.99999);
  }
  // Both replicas got some. A replica publishes its counters after the events of a step, so
  // they are read once all 4 x 30 prompt tokens are counted.
  auto counted = [&] {
    return (*group)->replica_stats(0).prompt_tokens_total +
           (*group)->replica_stats(1).prompt_tokens_total;
  };
  for (int i = 0; i < 2500 && counted() < 120u; ++i) std::this_thread::sleep_for(2ms);
  EXPECT_EQ(counted(), 120u);
  EXPECT_GT((*group)->replica_stats(0).prompt_tokens_total, 0u);
  EXPECT_GT((*group)->replica_stats(1).prompt_tokens_total, 0u);
}

// The batcher alone: FIFO admission under the token budget, the sequence limit and the blocks.
TEST(EmbeddingBatcherTest, PlansUnderBudgetSequencesAndBlocks) {
  BlockManager blocks(/*n_blocks=*/4, /*block_size=*/4);
  EmbeddingBatcher batcher(blocks, /*max_pass_tokens=*/6, /*max_pass_seqs=*/2, /*n_embd=*/2);
  auto job = std::make_unique<EmbeddingJob>();
  job->inputs = {{1, 2, 3, 4, 5}, {6}, {7, 8}};
  job->pooling = EmbeddingPooling::kLast;
  batcher.add(std::move(job));
  SeqId next = 1;
  std::vector<EmbeddingJob*> started;
  Batch batch;
  ASSERT_TRUE(batcher.plan(batch, next, started));
  // Input 0 (5 tokens, 2 blocks) and input 1 (1 token): the budget and sequence limit allow
  // no more.
  EXPECT_EQ(batch.n_tokens(), 6);
  EXPECT_EQ(batch.n_seqs(), 2);
  EXPECT_EQ(started.size(), 1u);
  EXPECT_EQ(batch.logit_rows, (std::vector<int32_t>{4, 5}));  // last pooling: final rows only
  EXPECT_EQ(blocks.n_free(), 1);
  std::vector<std::unique_ptr<EmbeddingJob>> finished;
  const std::vector<float> hidden = {3, 4, 0, 2};
  batcher.complete(hidden, finished);
  EXPECT_TRUE(finished.empty());
  EXPECT_EQ(blocks.n_free(), 4);  // both inputs done, their blocks back
  ASSERT_TRUE(batcher.plan(batch, next, started));
  EXPECT_EQ(batch.n_tokens(), 2);
  EXPECT_EQ(batch.positions, (std::vector<int32_t>{0, 1}));
  batcher.complete(std::vector<float>{0, -5}, finished);
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0]->embeddings, (std::vector<float>{0.6f, 0.8f, 0, 1, 0, -1}));
  EXPECT_TRUE(batcher.idle());
}

TEST(EmbeddingBatcherTest, WaitsForBlocksAndChunksLongInputs) {
  BlockManager blocks(/*n_blocks=*/3, /*block_size=*/4);
  ASSERT_TRUE(blocks.reserve(99, 8).is_ok());  // a generation holds two blocks
  EmbeddingBatcher batcher(blocks, /*max_pass_tokens=*/3, /*max_pass_seqs=*/8, /*n_embd=*/1);
  auto job = std::make_unique<EmbeddingJob>();
  job->inputs = {{1, 2, 3, 4, 5, 6, 7}};
  batcher.add(std::move(job));
  SeqId next = 1;
  std::vector<EmbeddingJob*> started;
  Batch batch;
  EXPECT_FALSE(batcher.plan(batch, next, started));  // needs two blocks, one is free
  EXPECT_EQ(batcher.n_waiting(), 1);
  blocks.free_sequence(99);
  std::vector<std::unique_ptr<EmbeddingJob>> finished;
  for (int pass = 0; pass < 3; ++pass) {
    ASSERT_TRUE(batcher.plan(batch, next, started)) << pass;
    EXPECT_EQ(batch.positions.front(), pass * 3);
    EXPECT_EQ(batch.seq_lengths.front(), std::min(7, pass * 3 + 3));
    const std::vector<float> hidden(batch.logit_rows.size(), 1.0f);
    batcher.complete(hidden, finished);
  }
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0]->embeddings, std::vector<float>{1.0f});
  EXPECT_EQ(blocks.n_free(), 3);
}

}  // namespace
}  // namespace llamaserve
