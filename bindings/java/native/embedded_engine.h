// EmbeddedEngine: what one io.llamaserve.engine.LlamaEngine holds on the native side — a CPU
// engine with its tokenizer and chat template — and the prompt building the Java API needs.
// No JNI types appear here; jni_exports.cc only converts arguments and results.
//
// Thread safety: every method may be called from many threads at once (Engine::submit and
// the Tokenizer are thread-safe; the rest is immutable after open()).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/generate.h"
#include "engine/request.h"
#include "service/cpu_engine.h"
#include "tokenizer/chat_template.h"

namespace llamaserve::jni {

struct EmbeddedEngineOptions {
  std::string model_path;
  int32_t threads = 0;         // 0 = all online cores
  int64_t context_tokens = 0;  // per sequence; 0 = min(model, 4096)
  int32_t kv_sequences = 1;    // the KV cache holds context_tokens * kv_sequences tokens
  int32_t max_running = 8;
  int32_t max_waiting = 256;
  int32_t max_batch_tokens = 512;
  std::string chat_template;  // llama2 | llama3 | chatml; empty = detect from the model
};

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
  // Loads the model, resolves the chat template and starts the engine thread. Errors name
  // the file or option that was wrong.
  static Result<std::unique_ptr<EmbeddedEngine>> open(const EmbeddedEngineOptions& options);

  // Builds the prompt and submits it. Errors: kUnsupported (chat without a chat template),
  // and everything Engine::submit returns.
  Result<RequestHandle> submit(EmbeddedRequest request);

  std::vector<int32_t> tokenize(std::string_view text, bool add_special) const;
  // Raw bytes of the tokens (not necessarily valid UTF-8 when cut inside a character);
  // kInvalidArgument for an id outside the vocabulary.
  Result<std::string> detokenize(std::span<const int32_t> tokens) const;

  EngineStats stats() const { return cpu_.engine->stats(); }
  int32_t max_context() const { return cpu_.engine->max_context(); }
  std::string describe() const;

 private:
  explicit EmbeddedEngine(CpuEngine cpu, std::optional<ChatTemplate> chat_template)
      : cpu_(std::move(cpu)), chat_template_(std::move(chat_template)) {}

  CpuEngine cpu_;
  std::optional<ChatTemplate> chat_template_;  // none: chat requests are refused
};

}  // namespace llamaserve::jni
