#include "embedded_engine.h"

#include <optional>

#include <fmt/format.h>

#include "tokenizer/prompt_builder.h"
#include "tokenizer/tokenizer.h"

namespace llamaserve::jni {

Result<std::unique_ptr<EmbeddedEngine>> EmbeddedEngine::open(const ModelSpec& spec) {
  if (spec.path.empty()) return Status(StatusCode::kInvalidArgument, "no model path given");
  const LayoutSpec& layout = spec.layout;
  const EngineLimits& limits = spec.engine;
  if (layout.threads < 0 || spec.context_tokens < 0 || spec.kv_cache_tokens < 0 ||
      limits.max_running < 1 || limits.max_waiting < 0 || limits.max_batch_tokens < 0) {
    return make_error(StatusCode::kInvalidArgument,
                      "invalid engine options: threads {} (>= 0), context_tokens {} (>= 0), "
                      "kv_cache_tokens {} (>= 0), max_running {} (>= 1), max_waiting {} (>= 0), "
                      "max_batch_tokens {} (>= 0)",
                      layout.threads, spec.context_tokens, spec.kv_cache_tokens, limits.max_running,
                      limits.max_waiting, limits.max_batch_tokens);
  }
  if (layout.replicas < 1 || layout.tensor_parallel < 1 || layout.pipeline_parallel < 1 ||
      !(layout.gpu_memory_utilization > 0.0 && layout.gpu_memory_utilization <= 1.0)) {
    return make_error(StatusCode::kInvalidArgument,
                      "invalid layout: replicas {} (>= 1), tensor_parallel {} (>= 1), "
                      "pipeline_parallel {} (>= 1), gpu_memory_utilization {} (in (0, 1])",
                      layout.replicas, layout.tensor_parallel, layout.pipeline_parallel,
                      layout.gpu_memory_utilization);
  }
  if (layout.tp_rank >= 0) {
    return Status(StatusCode::kInvalidArgument,
                  "an embedded engine runs its tensor-parallel ranks as threads (tp_rank -1)");
  }
  // Device strings and device counts are checked by ModelService (check_layout).
  OpenHooks hooks;
  hooks.show_progress = false;
  LS_ASSIGN_OR_RETURN(std::unique_ptr<ModelService> service, ModelService::open(spec, hooks));
  return std::unique_ptr<EmbeddedEngine>(new EmbeddedEngine(std::move(service)));
}

Result<RequestHandle> EmbeddedEngine::submit(EmbeddedRequest request) {
  GenerationRequest generation;
  if (request.chat) {
    const std::optional<ChatTemplate>& chat_template = service_->chat_template();
    if (!chat_template) {
      return Status(StatusCode::kUnsupported,
                    "this model has no chat template; open the engine with a chatTemplate "
                    "(llama2, llama3, chatml) or generate from a raw prompt");
    }
    // Only the template's markup becomes control tokens; message text stays text.
    LS_ASSIGN_OR_RETURN(
        generation.prompt_tokens,
        encode_chat_prompt(*chat_template, service_->tokenizer(), request.messages));
  } else {
    generation.prompt_tokens = encode_text_prompt(service_->tokenizer(), request.prompt_text);
  }
  generation.id = std::move(request.id);
  generation.max_new_tokens = request.max_new_tokens;
  generation.sampling = request.sampling;
  generation.stop_strings = std::move(request.stop_strings);
  generation.ignore_eos = request.ignore_eos;
  generation.timeout = request.timeout;
  return service_->engines().submit(std::move(generation));
}

std::vector<int32_t> EmbeddedEngine::tokenize(std::string_view text, bool add_special) const {
  return service_->tokenizer().encode(text, add_special, /*parse_special=*/false);
}

Result<std::string> EmbeddedEngine::detokenize(std::span<const int32_t> tokens) const {
  const int32_t n_vocab = service_->tokenizer().n_vocab();
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= n_vocab) {
      return make_error(StatusCode::kInvalidArgument,
                        "token {} at position {} is outside the vocabulary [0, {})", tokens[i], i,
                        n_vocab);
    }
  }
  return service_->tokenizer().decode(tokens, /*skip_special=*/true);
}

std::string EmbeddedEngine::describe() const {
  const std::optional<ChatTemplate>& chat_template = service_->chat_template();
  return fmt::format("{}; chat template: {}", service_->engines().describe(),
                     chat_template ? std::string(chat_template->name()) : "none");
}

}  // namespace llamaserve::jni
