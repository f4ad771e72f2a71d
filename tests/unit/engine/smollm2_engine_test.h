// Base of the engine tests on the real SmolLM2-135M model and CPU executors: the model and its
// tokenizer loaded once per suite (tests skip when the file is absent), engines over a KV cache
// of a given size, and greedy fixed-length requests.
#pragma once

#include <filesystem>
#include <memory>
#include <string_view>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "executor/cpu_executor.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace llamaserve::testing {

class SmolLm2EngineTest : public ::testing::Test {
 protected:
  static constexpr const char* kModelPath =
      LLAMASERVE_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

  static void SetUpTestSuite() {
    if (!std::filesystem::exists(kModelPath)) return;
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
  void SetUp() override {
    if (!model_) GTEST_SKIP() << "model not found: " << kModelPath;
  }

  static std::unique_ptr<Engine> make_engine(int64_t kv_tokens, EngineConfig config = {},
                                             int threads = 2,
                                             std::shared_ptr<const Tokenizer> tokenizer = {}) {
    CpuExecutorOptions options;
    options.threads = threads;
    options.kv_capacity_tokens = kv_tokens;
    auto executor = create_cpu_executor(model_, options);
    EXPECT_TRUE(executor.is_ok()) << executor.status().to_string();
    if (!executor.is_ok()) return nullptr;
    auto engine =
        Engine::create(std::move(executor).value(), tokenizer ? tokenizer : tokenizer_, config);
    EXPECT_TRUE(engine.is_ok()) << engine.status().to_string();
    return engine.is_ok() ? std::move(engine).value() : nullptr;
  }

  // Greedy, a fixed number of tokens (EOS ignored), so that every run compares as many.
  static GenerationRequest greedy(std::string_view prompt, int32_t max_new_tokens) {
    GenerationRequest request;
    request.prompt_tokens =
        tokenizer_->encode(prompt, /*add_special=*/true, /*parse_special=*/false);
    request.max_new_tokens = max_new_tokens;
    request.sampling.temperature = 0.0f;
    request.ignore_eos = true;
    return request;
  }

  inline static std::shared_ptr<const LoadedModel> model_;
  inline static std::shared_ptr<const Tokenizer> tokenizer_;
};

}  // namespace llamaserve::testing
