#include "engine/generate.h"

namespace llamaserve {

Result<Completion> read_to_end(RequestHandle handle,
                               const std::function<void(std::string_view text)>& on_text,
                               std::chrono::milliseconds wait) {
  Completion out;
  // The engine always ends a stream (shutdown included), so this wait is bounded by it.
  while (std::optional<GenerationEvent> event = handle.next(wait)) {
    if (event->kind == GenerationEvent::Kind::kDelta) {
      out.text += event->text;
      out.tokens.insert(out.tokens.end(), event->tokens.begin(), event->tokens.end());
      if (on_text && !event->text.empty()) on_text(event->text);
      continue;
    }
    out.finish_reason = event->finish_reason;
    out.error = std::move(event->error);
    out.usage = event->usage;
    return out;
  }
  return make_error(StatusCode::kDeadlineExceeded, "{}: no event within {} s", handle.id(),
                    std::chrono::duration_cast<std::chrono::seconds>(wait).count());
}

Result<Completion> generate(Engine& engine, GenerationRequest request,
                            const std::function<void(std::string_view text)>& on_text) {
  LS_ASSIGN_OR_RETURN(RequestHandle handle, engine.submit(std::move(request)));
  return read_to_end(std::move(handle), on_text);
}

Result<Completion> generate(EngineGroup& engines, GenerationRequest request,
                            const std::function<void(std::string_view text)>& on_text) {
  LS_ASSIGN_OR_RETURN(RequestHandle handle, engines.submit(std::move(request)));
  return read_to_end(std::move(handle), on_text);
}

}  // namespace llamaserve
