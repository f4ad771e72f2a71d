// The warm-up plan (which pass shapes run before /ready) and a warm-up through real CPU
// engines: every request of every wave ends normally and leaves the KV cache free.
#include "service/warm_up.h"

#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "executor/cpu_executor.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace llamaserve {
namespace {

TEST(WarmupWaves, EveryPowerOfTwoOfPromptRowsAndDecodeSequences) {
  WarmupLimits limits;
  limits.tokens = 2;
  limits.max_batch_tokens = 300;
  limits.max_running = 48;
  limits.max_context = 4096;
  limits.every_shape = true;
  const std::vector<WarmupWave> waves = warmup_waves(limits);
  std::vector<int32_t> prompt_rows;
  std::vector<size_t> decode_seqs;
  for (const WarmupWave& wave : waves) {
    if (wave.prompt_tokens.size() == 1) {
      prompt_rows.push_back(wave.prompt_tokens[0]);
      EXPECT_EQ(wave.max_new_tokens, 2);
    } else {
      decode_seqs.push_back(wave.prompt_tokens.size());
      for (int32_t n : wave.prompt_tokens) EXPECT_EQ(n, 1);
      EXPECT_EQ(wave.max_new_tokens, 3);  // admitted in one step, then two decode steps
    }
  }
  EXPECT_EQ(prompt_rows, (std::vector<int32_t>{1, 2, 4, 8, 16, 32, 64, 128, 256, 300}));
  EXPECT_EQ(decode_seqs, (std::vector<size_t>{2, 4, 8, 16, 32, 48}));
  EXPECT_TRUE(waves.back().random_sampling);
  for (size_t i = 0; i + 1 < waves.size(); ++i) EXPECT_FALSE(waves[i].random_sampling);
}

TEST(WarmupWaves, LimitsBoundTheShapes) {
  WarmupLimits limits;
  limits.tokens = 4;
  limits.max_batch_tokens = 8;
  limits.max_running = 1024;
  limits.max_waiting = 20;  // the queue takes 20 requests at once
  limits.max_context = 7;   // prompts of at most 7 - 4 tokens
  limits.every_shape = true;
  const std::vector<WarmupWave> waves = warmup_waves(limits);
  ASSERT_GE(waves.size(), 3u);
  EXPECT_EQ(waves[0].prompt_tokens, std::vector<int32_t>{1});
  EXPECT_EQ(waves[1].prompt_tokens, std::vector<int32_t>{2});
  EXPECT_EQ(waves[2].prompt_tokens, std::vector<int32_t>{3});
  // 20 one-token prompts take three steps of 8 to admit: the first keep decoding meanwhile.
  EXPECT_EQ(waves.back().prompt_tokens.size(), 20u);
  EXPECT_EQ(waves.back().max_new_tokens, 6);

  limits.every_shape = false;
  ASSERT_EQ(warmup_waves(limits).size(), 1u);
  EXPECT_EQ(warmup_waves(limits)[0].prompt_tokens, std::vector<int32_t>{3});
  limits.tokens = 0;
  EXPECT_TRUE(warmup_waves(limits).empty());
}

TEST(WarmUp, RunsEveryWaveOnEveryReplica) {
  const std::string path = LLAMASERVE_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "model not found: " << path;
  auto model = load_model(path);
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  auto tokenizer = Tokenizer::from_gguf(*(*model)->file);
  ASSERT_TRUE(tokenizer.is_ok());
  auto shared_tokenizer = std::make_shared<const Tokenizer>(std::move(tokenizer).value());
  std::vector<std::unique_ptr<Engine>> replicas;
  EngineConfig config;
  config.max_running = 8;
  config.max_batch_tokens = 32;
  for (int r = 0; r < 2; ++r) {
    CpuExecutorOptions options;
    options.threads = 1;
    options.kv_capacity_tokens = 512;
    auto executor = create_cpu_executor(*model, options);
    ASSERT_TRUE(executor.is_ok()) << executor.status().to_string();
    auto engine = Engine::create(std::move(executor).value(), shared_tokenizer, config);
    ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
    replicas.push_back(std::move(engine).value());
  }
  auto group = EngineGroup::create(std::move(replicas));
  ASSERT_TRUE(group.is_ok());
  WarmupLimits limits;
  limits.max_batch_tokens = 32;
  limits.max_running = 8;
  limits.max_context = (*group)->max_context();
  limits.every_shape = true;
  ASSERT_TRUE(warm_up(**group, limits).is_ok());
  // Waves: prompts of 1..32 rows (6), decodes of 2, 4, 8 sequences (14 requests): 20 each.
  for (size_t r = 0; r < 2; ++r) {
    EngineStats stats;
    for (int i = 0; i < 200; ++i) {
      stats = (*group)->replica_stats(r);
      if (stats.requests_finished == 20 && stats.kv_blocks_free == stats.kv_blocks_total) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(stats.requests_finished, 20u) << "replica " << r;
    EXPECT_EQ(stats.kv_blocks_free, stats.kv_blocks_total);
    EXPECT_EQ(stats.prompt_tokens_total, 1u + 2 + 4 + 8 + 16 + 32 + 14) << "replica " << r;
  }
}

}  // namespace
}  // namespace llamaserve
