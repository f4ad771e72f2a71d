// ModelService on one GPU: open() builds a serving model from its spec (executor, engine,
// warm-up) that generates; close() gives back every device pool it took, and opening and
// closing again and again does not leak device memory.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "backend/cuda/device_pool.h"
#include "engine/generate.h"
#include "model/importers/synth_model.h"
#include "service/model_service.h"
#include "test_util.h"

namespace llamaserve {
namespace {

namespace fs = std::filesystem;
using cuda::DevicePool;
using cuda::testing::vocab_path;

class ModelServiceTest : public cuda::testing::GpuTest {
 protected:
  void SetUp() override {
    cuda::testing::GpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    const fs::path path = fs::temp_directory_path() / "llamaserve-model-service-tiny-q8_0.gguf";
    SynthOptions o;
    o.shape = "tiny";
    o.type = "q8_0";
    o.output_path = path.string();
    o.vocab_path = vocab_path();
    o.seed = 11;
    auto written = write_synthetic_model(o);
    ASSERT_TRUE(written.is_ok()) << written.status().to_string();
    spec_.path = path.string();
    spec_.layout.device = "cuda:0";
    spec_.layout.gpu_memory_utilization = 0.2;
    spec_.context_tokens = 256;
    spec_.engine.max_running = 4;
    spec_.warmup_tokens = 2;
  }

  static uint64_t free_device_bytes() {
    size_t free_bytes = 0, total_bytes = 0;
    EXPECT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
    return free_bytes;
  }

  ModelSpec spec_;
};

TEST_F(ModelServiceTest, OpensGeneratesAndGivesItsPoolsBack) {
  ASSERT_EQ(DevicePool::live_pools(), 0);
  auto opened = ModelService::open(spec_, OpenHooks{.show_progress = false});
  ASSERT_TRUE(opened.is_ok()) << opened.status().to_string();
  std::unique_ptr<ModelService> model = std::move(opened).value();
  EXPECT_GT(DevicePool::live_pools(), 0);
  EXPECT_GT(DevicePool::live_bytes(), 0u);
  EXPECT_EQ(model->context_tokens(), 256);
  EXPECT_EQ(model->engines().max_context(), 256);

  GenerationRequest request;
  request.id = "greedy";
  request.prompt_tokens = model->tokenizer().encode("Hello there", /*add_special=*/true,
                                                    /*parse_special=*/false);
  request.max_new_tokens = 8;
  request.sampling.temperature = 0.0f;
  request.ignore_eos = true;
  auto completion = generate(model->engines(), std::move(request));
  ASSERT_TRUE(completion.is_ok()) << completion.status().to_string();
  EXPECT_EQ(completion->finish_reason, FinishReason::kLength);
  EXPECT_EQ(completion->tokens.size(), 8u);

  model->close();
  EXPECT_EQ(DevicePool::live_pools(), 0);
  EXPECT_EQ(DevicePool::live_bytes(), 0u);
}

// The first cycle creates the CUDA context and library handles; later ones must leave the free
// memory where the first left it.
TEST_F(ModelServiceTest, RepeatedOpenAndCloseDoesNotLeak) {
  uint64_t after_first = 0;
  for (int cycle = 0; cycle < 4; ++cycle) {
    auto opened = ModelService::open(spec_, OpenHooks{.show_progress = false});
    ASSERT_TRUE(opened.is_ok()) << opened.status().to_string();
    (*opened)->close();
    opened = Status(StatusCode::kCancelled, "closed");
    ASSERT_EQ(DevicePool::live_bytes(), 0u) << "cycle " << cycle;
    const uint64_t free_now = free_device_bytes();
    if (cycle == 0) {
      after_first = free_now;
      continue;
    }
    constexpr uint64_t kSlack = 16ull << 20;  // allocator granularity
    EXPECT_GE(free_now + kSlack, after_first) << "cycle " << cycle << ": device memory leaked";
  }
}

TEST_F(ModelServiceTest, RefusesWhatDoesNotFitWithoutKeepingAnything) {
  spec_.layout.gpu_memory_utilization = 0.01;
  spec_.kv_cache_tokens = int64_t{1} << 30;  // far beyond the budget
  auto opened = ModelService::open(spec_, OpenHooks{.show_progress = false});
  ASSERT_FALSE(opened.is_ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kResourceExhausted) << opened.status().to_string();
  EXPECT_EQ(DevicePool::live_pools(), 0);
}

// Structured output sampled on the device (the token masks applied to the logits there):
// every output of a bounded schema at temperature 1 is a complete document that matches it.
TEST_F(ModelServiceTest, ConstrainedRowsSampleOnTheDevice) {
  auto opened = ModelService::open(spec_, OpenHooks{.show_progress = false});
  ASSERT_TRUE(opened.is_ok()) << opened.status().to_string();
  std::unique_ptr<ModelService> model = std::move(opened).value();
  auto constraint = model->constraints().get(grammar::FormatKind::kJsonSchema,
                                             nlohmann::ordered_json::parse(R"({"type": "object",
        "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0,
        "maximum": 99}, "c": {"enum": ["red", "green"]}},
        "required": ["ok", "n", "c"], "additionalProperties": false})"));
  ASSERT_TRUE(constraint.is_ok()) << constraint.status().to_string();
  for (uint64_t seed = 0; seed < 8; ++seed) {
    GenerationRequest request;
    request.prompt_tokens = model->tokenizer().encode("JSON:", true, false);
    request.max_new_tokens = 64;
    request.sampling.temperature = 1.0f;
    request.sampling.seed = seed;
    request.sampling.constraint = *constraint;
    auto completion = generate(model->engines(), std::move(request));
    ASSERT_TRUE(completion.is_ok()) << completion.status().to_string();
    EXPECT_EQ(completion->finish_reason, FinishReason::kStop) << completion->text;
    const auto document = nlohmann::json::parse(completion->text, nullptr, false);
    ASSERT_FALSE(document.is_discarded()) << completion->text;
    EXPECT_TRUE(document["ok"].is_boolean()) << completion->text;
    EXPECT_TRUE(document["n"].is_number_integer() && document["n"] >= 0 && document["n"] <= 99)
        << completion->text;
    EXPECT_TRUE(document["c"] == "red" || document["c"] == "green") << completion->text;
    EXPECT_EQ(document.size(), 3u) << completion->text;
  }
  model->close();
}

// Embeddings through the whole service on the GPU (engine batching, forward_hidden, pooling)
// against the same service on the CPU: several inputs of odd lengths, one of them longer than
// a pass (so it runs in chunks), cosine >= 0.999 per input.
TEST_F(ModelServiceTest, EmbeddingsOnTheDeviceMatchTheCpu) {
  spec_.engine.max_batch_tokens = 64;
  auto gpu = ModelService::open(spec_, OpenHooks{.show_progress = false});
  ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
  ModelSpec cpu_spec = spec_;
  cpu_spec.layout.device = "cpu";
  auto cpu = ModelService::open(cpu_spec, OpenHooks{.show_progress = false});
  ASSERT_TRUE(cpu.is_ok()) << cpu.status().to_string();
  auto embed = [](ModelService& model, const std::vector<std::vector<int32_t>>& inputs) {
    EmbeddingRequest request;
    request.inputs = inputs;
    auto handle = model.engines().submit_embedding(std::move(request));
    EXPECT_TRUE(handle.is_ok()) << handle.status().to_string();
    std::optional<GenerationEvent> event;
    while ((event = handle->next(std::chrono::seconds(60))) &&
           event->kind != GenerationEvent::Kind::kFinish) {
    }
    EXPECT_TRUE(event.has_value());
    EXPECT_EQ(event->finish_reason, FinishReason::kStop) << event->error.to_string();
    return event->embeddings;
  };
  std::vector<std::vector<int32_t>> inputs;
  for (int32_t length : {1, 7, 33, 150}) {
    std::vector<int32_t> tokens;
    for (int32_t i = 0; i < length; ++i) tokens.push_back(100 + (i * 37) % 5000);
    inputs.push_back(tokens);
  }
  const std::vector<float> on_gpu = embed(**gpu, inputs);
  const std::vector<float> on_cpu = embed(**cpu, inputs);
  const size_t n_embd = static_cast<size_t>((*gpu)->model_config().n_embd);
  ASSERT_EQ(on_gpu.size(), inputs.size() * n_embd);
  ASSERT_EQ(on_cpu.size(), on_gpu.size());
  for (size_t r = 0; r < inputs.size(); ++r) {
    double dot = 0, norm_gpu = 0, norm_cpu = 0;
    for (size_t i = r * n_embd; i < (r + 1) * n_embd; ++i) {
      dot += static_cast<double>(on_gpu[i]) * on_cpu[i];
      norm_gpu += static_cast<double>(on_gpu[i]) * on_gpu[i];
      norm_cpu += static_cast<double>(on_cpu[i]) * on_cpu[i];
    }
    EXPECT_NEAR(std::sqrt(norm_gpu), 1.0, 1e-4) << "input " << r;
    EXPECT_GE(dot / std::sqrt(norm_gpu * norm_cpu), 0.999) << "input " << r;
  }
  (*gpu)->close();
  (*cpu)->close();
}

}  // namespace
}  // namespace llamaserve
