// EmbeddedEngine: what one io.llamaserve.engine.LlamaEngine holds on the native side — a model
// opened by ModelService for its spec's layout (the CPU, one GPU, tensor or pipeline parallel
// GPUs, replicas) with its tokenizer and chat template — and the prompt building the Java API
// needs. No JNI types appear here; jni_exports.cc only converts arguments and results.
//
// Thread safety: every method may be called from many threads at once (EngineGroup::submit
// and the Tokenizer are thread-safe; the rest is immutable after open()).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/generate.h"
#include "engine/request.h"
#include "service/config.h"
#include "service/model_service.h"
#include "tokenizer/chat_template.h"

namespace llamaserve::jni {

// One generation as the Java side describes it: chat messages (templated here) or a raw
// prompt (tokenized with the model's BOS and with special-token markup recognised, as the
// server's /v1/completions does).
struct EmbeddedRequest {
  std::string id;
  bool chat = false;
  std::vector<ChatMessage> messages;  // when chat
  std::string prompt_text;            // when !chat
  int32_t max_new_tokens = 0;
  SamplingParams sampling;
  std::vector<std::string> stop_strings;
  bool ignore_eos = false;
  std::chrono::milliseconds timeout{0};  // 0 = none
};

class EmbeddedEngine {
 public:
  // Checks the spec's numbers, then opens it through ModelService without progress output:
  // loads the model, resolves the chat template, builds the layout's executors and starts
  // and warms up its engines. Errors name the file, device or option that was wrong (a CUDA
  // device in a build without CUDA: kUnsupported).
  static Result<std::unique_ptr<EmbeddedEngine>> open(const ModelSpec& spec);

  // Builds the prompt and submits it. Errors: kUnsupported (chat without a chat template),
  // and everything EngineGroup::submit returns.
  Result<RequestHandle> submit(EmbeddedRequest request);

  std::vector<int32_t> tokenize(std::string_view text, bool add_special) const;
  // Raw bytes of the tokens (not necessarily valid UTF-8 when cut inside a character);
  // kInvalidArgument for an id outside the vocabulary.
  Result<std::string> detokenize(std::span<const int32_t> tokens) const;

  // Summed over the replicas; the counters include the warm-up generation of open().
  EngineStats stats() const { return service_->engines().stats(); }
  int32_t max_context() const { return service_->engines().max_context(); }
  std::string describe() const;
  const ModelService& service() const { return *service_; }

 private:
  explicit EmbeddedEngine(std::unique_ptr<ModelService> service) : service_(std::move(service)) {}

  // Destroying it shuts the engines down (open requests end with kCancelled) and frees the
  // model and the executors' device memory.
  std::unique_ptr<ModelService> service_;
};

}  // namespace llamaserve::jni
