// Sequence: the scheduling state of one request. The scheduler owns it; the engine keeps the
// per-request extras (sampler, detokenizer, channel) next to it, keyed by the same id.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/block_manager.h"

namespace llamaserve {

enum class SequenceState { kWaiting, kRunning };

struct Sequence {
  SeqId id = 0;
  // The prompt followed by every generated token.
  std::vector<int32_t> tokens;
  int32_t n_prompt = 0;
  // Leading tokens of `tokens` whose K/V are in the cache. A running sequence has
  // n_computed < tokens.size(): the rest is fed at its next step(s). Reset to 0 by preemption,
  // which recomputes prompt and generated tokens alike.
  int32_t n_computed = 0;

  SequenceState state = SequenceState::kWaiting;
  bool ever_scheduled = false;  // false until its first chunk is planned
  int32_t n_preemptions = 0;

  int32_t n_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t n_generated() const { return n_tokens() - n_prompt; }
  int32_t n_pending() const { return n_tokens() - n_computed; }
};

}  // namespace llamaserve
