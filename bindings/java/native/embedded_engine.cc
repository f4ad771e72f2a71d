#include "embedded_engine.h"

#include <fmt/format.h>

#include "tokenizer/prompt_builder.h"
#include "tokenizer/tokenizer.h"

namespace llamaserve::jni {

Result<std::unique_ptr<EmbeddedEngine>> EmbeddedEngine::open(const EmbeddedEngineOptions& options) {
  if (options.model_path.empty()) {
    return Status(StatusCode::kInvalidArgument, "no model path given");
  }
  if (options.threads < 0 || options.context_tokens < 0 || options.kv_sequences < 1 ||
      options.max_running < 1 || options.max_waiting < 0 || options.max_batch_tokens < 1) {
    return make_error(StatusCode::kInvalidArgument,
                      "invalid engine options: threads {} (>= 0), context_tokens {} (>= 0), "
                      "kv_sequences {} (>= 1), max_running {} (>= 1), max_waiting {} (>= 0), "
                      "max_batch_tokens {} (>= 1)",
                      options.threads, options.context_tokens, options.kv_sequences,
                      options.max_running, options.max_waiting, options.max_batch_tokens);
  }
  CpuEngineOptions cpu_options;
  cpu_options.model_path = options.model_path;
  cpu_options.threads = options.threads;
  cpu_options.context_tokens = options.context_tokens;
  cpu_options.kv_sequences = options.kv_sequences;
  cpu_options.engine.max_running = options.max_running;
  cpu_options.engine.max_waiting = options.max_waiting;
  cpu_options.engine.max_batch_tokens = options.max_batch_tokens;
  LS_ASSIGN_OR_RETURN(CpuEngine cpu, open_cpu_engine(cpu_options));

  std::optional<ChatTemplate> chat_template;
  auto found = ChatTemplate::for_model(cpu.tokenizer->data().chat_template, options.chat_template);
  if (found.is_ok()) {
    chat_template = std::move(found).value();
  } else if (!options.chat_template.empty()) {
    // A template the caller named must exist; a model without one only loses chat().
    return found.status().with_context(fmt::format("chat template '{}'", options.chat_template));
  }
  return std::unique_ptr<EmbeddedEngine>(
      new EmbeddedEngine(std::move(cpu), std::move(chat_template)));
}

Result<RequestHandle> EmbeddedEngine::submit(EmbeddedRequest request) {
  GenerationRequest generation;
  if (request.chat) {
    if (!chat_template_) {
      return Status(StatusCode::kUnsupported,
                    "this model has no chat template; open the engine with a chatTemplate "
                    "(llama2, llama3, chatml) or generate from a raw prompt");
    }
    // Only the template's markup becomes control tokens; message text stays text.
    LS_ASSIGN_OR_RETURN(generation.prompt_tokens,
                        encode_chat_prompt(*chat_template_, *cpu_.tokenizer, request.messages));
  } else {
    generation.prompt_tokens = encode_text_prompt(*cpu_.tokenizer, request.prompt_text);
  }
  generation.id = std::move(request.id);
  generation.max_new_tokens = request.max_new_tokens;
  generation.sampling = request.sampling;
  generation.stop_strings = std::move(request.stop_strings);
  generation.ignore_eos = request.ignore_eos;
  generation.timeout = request.timeout;
  return cpu_.engine->submit(std::move(generation));
}

std::vector<int32_t> EmbeddedEngine::tokenize(std::string_view text, bool add_special) const {
  return cpu_.tokenizer->encode(text, add_special, /*parse_special=*/false);
}

Result<std::string> EmbeddedEngine::detokenize(std::span<const int32_t> tokens) const {
  const int32_t n_vocab = cpu_.tokenizer->n_vocab();
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= n_vocab) {
      return make_error(StatusCode::kInvalidArgument,
                        "token {} at position {} is outside the vocabulary [0, {})", tokens[i], i,
                        n_vocab);
    }
  }
  return cpu_.tokenizer->decode(tokens, /*skip_special=*/true);
}

std::string EmbeddedEngine::describe() const {
  return fmt::format("{}; chat template: {}", cpu_.engine->describe(),
                     chat_template_ ? std::string(chat_template_->name()) : "none");
}

}  // namespace llamaserve::jni
