// The engine on one GPU drawing tokens on the device (Executor::forward_sampled): greedy
// outputs equal those of an engine that samples every token on the host from copied logits,
// also under concurrency; a request that needs the host sampler (log probabilities) shares
// steps with device-sampled ones and gets its log probabilities; seeded random requests
// repeat; the stats count the device-sampled steps. The engines run in the layout
// test_layout.h names (LLAMASERVE_TEST_LAYOUT): one GPU, tensor parallel, pipeline, tp x pp, or
// a group of one-GPU replicas behind the router.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_group.h"
#include "executor/cuda_executor.h"
#include "model/importers/synth_model.h"
#include "test_layout.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace llamaserve {
namespace {

namespace fs = std::filesystem;
using cuda::testing::source_dir;
using cuda::testing::vocab_path;

class GpuEngineTest : public cuda::testing::GpuTest {
 protected:
  void SetUp() override {
    cuda::testing::GpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    const fs::path path = fs::temp_directory_path() / "llamaserve-gpu-engine-tiny-q8_0.gguf";
    SynthOptions o;
    o.shape = "tiny";
    o.type = "q8_0";
    o.output_path = path.string();
    o.vocab_path = vocab_path();
    o.seed = 5;
    auto written = write_synthetic_model(o);
    ASSERT_TRUE(written.is_ok()) << written.status().to_string();
    auto model = load_model(path.string());
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();
    model_ = *model;
    auto vocab = GgufFile::open(vocab_path());
    ASSERT_TRUE(vocab.is_ok()) << vocab.status().to_string();
    auto tokenizer = Tokenizer::from_gguf(**vocab);
    ASSERT_TRUE(tokenizer.is_ok()) << tokenizer.status().to_string();
    tokenizer_ = std::make_shared<const Tokenizer>(std::move(tokenizer).value());
    LLAMASERVE_SKIP_UNLESS_LAYOUT_FITS(layout_, *model_);
  }

  // The layout's replicas (one unless replicasN) behind the router.
  std::unique_ptr<EngineGroup> engine(bool device_sampling, bool prefix_caching = true,
                                      int32_t max_batch_tokens = 128) {
    CudaExecutorOptions o;
    o.kv_capacity_tokens = 256 * 16;
    o.max_batch_tokens = 128;
    o.max_seqs = 16;
    o.max_context_tokens = 512;
    std::vector<std::unique_ptr<Engine>> replicas;
    for (int r = 0; r < layout_.replicas; ++r) {
      auto executor = testing::create_layout_executor(model_, o, layout_, r);
      EXPECT_TRUE(executor.is_ok()) << executor.status().to_string();
      if (!executor.is_ok()) return nullptr;
      EXPECT_TRUE((*executor)->samples_on_device());
      EngineConfig config;
      config.max_running = 8;
      config.max_batch_tokens = max_batch_tokens;
      config.device_sampling = device_sampling;
      config.prefix_caching = prefix_caching;
      auto created = Engine::create(std::move(executor).value(), tokenizer_, config);
      EXPECT_TRUE(created.is_ok()) << created.status().to_string();
      if (!created.is_ok()) return nullptr;
      replicas.push_back(std::move(created).value());
    }
    auto group = EngineGroup::create(std::move(replicas));
    EXPECT_TRUE(group.is_ok()) << group.status().to_string();
    return group.is_ok() ? std::move(group).value() : nullptr;
  }

  GenerationRequest request(int32_t salt, int32_t n_prompt) const {
    GenerationRequest r;
    const auto n_vocab = static_cast<int32_t>(model_->config.n_vocab);
    for (int32_t i = 0; i < n_prompt; ++i)
      r.prompt_tokens.push_back((i * 7919 + salt * 104729) % n_vocab);
    r.max_new_tokens = 20;
    r.ignore_eos = true;
    r.sampling.temperature = 0.0f;
    return r;
  }

  struct Output {
    std::vector<int32_t> tokens;
    size_t logprob_entries = 0;
  };
  // Submits every request at once and collects each one's tokens.
  static std::vector<Output> run_all(EngineGroup& engine,
                                     const std::vector<GenerationRequest>& requests) {
    std::vector<RequestHandle> handles;
    for (const GenerationRequest& r : requests) {
      auto handle = engine.submit(r);
      EXPECT_TRUE(handle.is_ok()) << handle.status().to_string();
      if (handle.is_ok()) handles.push_back(std::move(handle).value());
    }
    std::vector<Output> outputs(handles.size());
    for (size_t i = 0; i < handles.size(); ++i) {
      while (auto event = handles[i].next(std::chrono::seconds(60))) {
        outputs[i].tokens.insert(outputs[i].tokens.end(), event->tokens.begin(),
                                 event->tokens.end());
        outputs[i].logprob_entries += event->logprobs.size();
        if (event->kind == GenerationEvent::Kind::kFinish) {
          EXPECT_TRUE(event->error.is_ok()) << event->error.to_string();
          EXPECT_EQ(event->usage.completion_tokens, 20);
        }
      }
    }
    return outputs;
  }

  const testing::TestLayout layout_ = testing::test_layout();
  std::shared_ptr<const LoadedModel> model_;
  std::shared_ptr<const Tokenizer> tokenizer_;
};

// One request at a time, so that both engines run the same passes (concurrent requests make
// batches whose make-up depends on timing, and a different make-up may take another kernel
// path with other rounding): the device's greedy draws are the host sampler's tokens. Then all
// at once on the device, one of them needing the host sampler in every step it shares.
TEST_F(GpuEngineTest, DeviceSamplingGivesTheHostSamplersGreedyTokens) {
  auto device = engine(true);
  auto host = engine(false);
  ASSERT_TRUE(device && host);
  std::vector<GenerationRequest> requests;
  for (int32_t i = 0; i < 6; ++i) requests.push_back(request(i, 3 + 5 * i));
  requests[2].sampling.logprobs = true;
  requests[2].sampling.top_logprobs = 3;
  for (size_t i = 0; i < requests.size(); ++i) {
    const std::vector<Output> on_device = run_all(*device, {requests[i]});
    const std::vector<Output> on_host = run_all(*host, {requests[i]});
    ASSERT_TRUE(on_device.size() == 1 && on_host.size() == 1);
    EXPECT_EQ(on_device[0].tokens.size(), 20u) << "request " << i;
    EXPECT_EQ(on_device[0].tokens, on_host[0].tokens) << "request " << i;
  }
  EXPECT_GT(device->stats().device_sampled_steps_total, 0u);
  EXPECT_EQ(host->stats().device_sampled_steps_total, 0u);

  const std::vector<Output> together = run_all(*device, requests);
  ASSERT_EQ(together.size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(together[i].tokens.size(), 20u) << "request " << i;
  }
  EXPECT_EQ(together[2].logprob_entries, together[2].tokens.size());
  EXPECT_EQ(device->stats().device_sampled_steps_total, device->stats().steps_total);
  // The router spread the six requests: every replica ran steps of its own.
  for (size_t r = 0; r < device->size(); ++r) {
    EXPECT_GT(device->replica_stats(r).steps_total, 0u) << "replica " << r;
  }
}

TEST_F(GpuEngineTest, SeededRequestsRepeatOnTheDevice) {
  auto device = engine(true);
  ASSERT_NE(device, nullptr);
  GenerationRequest seeded = request(9, 12);
  seeded.sampling.temperature = 1.5f;  // a flat distribution: different seeds diverge
  seeded.sampling.top_k = 200;
  seeded.sampling.top_p = 0.95f;
  seeded.sampling.seed = 77;
  GenerationRequest other_seed = seeded;
  other_seed.sampling.seed = 78;
  const std::vector<Output> first = run_all(*device, {seeded});
  const std::vector<Output> again = run_all(*device, {seeded});
  const std::vector<Output> other = run_all(*device, {other_seed});
  ASSERT_TRUE(first.size() == 1 && again.size() == 1 && other.size() == 1);
  EXPECT_EQ(first[0].tokens, again[0].tokens);
  EXPECT_NE(first[0].tokens, other[0].tokens);
  const uint64_t steps = device->stats().steps_total;
  EXPECT_EQ(device->stats().device_sampled_steps_total, steps);
}

// Prefix caching on the device: requests that share a 40-token prefix and diverge after it
// (one repeats a whole prompt) give the greedy tokens of an engine without the cache. One
// request at a time with passes of one KV block (16 tokens), so that every block is computed
// by the same pass in both engines (other pass shapes may round differently). Then a crowd with
// cancellations over the same prompts ends cleanly and reuses blocks.
TEST_F(GpuEngineTest, PrefixCacheGivesTheUncachedGreedyTokens) {
  auto cached = engine(true, /*prefix_caching=*/true, /*max_batch_tokens=*/16);
  auto uncached = engine(true, /*prefix_caching=*/false, /*max_batch_tokens=*/16);
  ASSERT_TRUE(cached && uncached);
  const GenerationRequest shared = request(3, 40);
  std::vector<GenerationRequest> requests;
  for (int32_t i = 0; i < 5; ++i) {
    GenerationRequest r = shared;
    const GenerationRequest tail = request(20 + i, 3 + 7 * i);
    r.prompt_tokens.insert(r.prompt_tokens.end(), tail.prompt_tokens.begin(),
                           tail.prompt_tokens.end());
    requests.push_back(std::move(r));
  }
  requests.push_back(requests[1]);
  requests.push_back(shared);
  for (size_t i = 0; i < requests.size(); ++i) {
    const std::vector<Output> with_cache = run_all(*cached, {requests[i]});
    const std::vector<Output> without = run_all(*uncached, {requests[i]});
    ASSERT_TRUE(with_cache.size() == 1 && without.size() == 1);
    EXPECT_EQ(with_cache[0].tokens, without[0].tokens) << "request " << i;
  }
  // Replicas each have their own cache: the router decides which ones were warm.
  const EngineStats stats = cached->stats();
  const uint64_t min_hits = layout_.replicas == 1 ? 32u * (requests.size() - 1) : 1u;
  EXPECT_GE(stats.prefix_cache_hit_tokens_total, min_hits);
  EXPECT_EQ(uncached->stats().prefix_cache_hit_tokens_total, 0u);

  std::vector<RequestHandle> handles;
  for (int round = 0; round < 4; ++round) {
    for (const GenerationRequest& r : requests) {
      auto handle = cached->submit(r);
      ASSERT_TRUE(handle.is_ok()) << handle.status().to_string();
      handles.push_back(std::move(handle).value());
      if (handles.size() % 3 == 0) handles.back().cancel();
    }
  }
  for (RequestHandle& handle : handles) {
    int n_finish = 0;
    while (auto event = handle.next(std::chrono::seconds(60))) {
      if (event->kind == GenerationEvent::Kind::kFinish) ++n_finish;
    }
    EXPECT_EQ(n_finish, 1);
  }
  for (int i = 0; i < 200 && cached->stats().kv_blocks_free != cached->stats().kv_blocks_total;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(cached->stats().kv_blocks_free, cached->stats().kv_blocks_total);
  EXPECT_GT(cached->stats().prefix_cache_hit_tokens_total, stats.prefix_cache_hit_tokens_total);
}

}  // namespace
}  // namespace llamaserve
