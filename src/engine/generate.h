// A convenience over Engine for callers that want one generation at a time (CLI, warm-up,
// embedded use): run a request to the end while streaming its text to a callback.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"
#include "engine/engine_group.h"
#include "engine/request.h"

namespace llamaserve {

struct Completion {
  std::string text;
  std::vector<int32_t> tokens;
  FinishReason finish_reason = FinishReason::kNone;
  Status error;  // set for kError / kTimeout / kCancelled
  Usage usage;
};

// Submits `request` and reads its stream to the finish event, calling `on_text` (if set)
// with every non-empty delta as it arrives. Fails only if submit() does; how the generation
// ended is in the Completion.
Result<Completion> generate(Engine& engine, GenerationRequest request,
                            const std::function<void(std::string_view text)>& on_text = {});
// The same through a group's router.
Result<Completion> generate(EngineGroup& engines, GenerationRequest request,
                            const std::function<void(std::string_view text)>& on_text = {});
// Reads a submitted request's stream to its finish event (for callers that submit several
// before reading any). kDeadlineExceeded when no event arrives within `wait`.
Result<Completion> read_to_end(RequestHandle handle,
                               const std::function<void(std::string_view text)>& on_text = {},
                               std::chrono::milliseconds wait = std::chrono::hours(24));

}  // namespace llamaserve
