// ActiveRequest: the engine thread's per-request state next to the scheduler's Sequence:
// sampler, detokenizer, stop-string matcher, the text and tokens not yet streamed, timings.
#pragma once

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "engine/channel.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/sequence.h"
#include "engine/stop_matcher.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace llamaserve {

struct ActiveRequest {
  using Clock = std::chrono::steady_clock;

  ActiveRequest(const GenerationRequest& request, std::shared_ptr<RequestChannel> channel_in,
                Sequence* seq_in, uint64_t seed, const Tokenizer& tokenizer)
      : channel(std::move(channel_in)),
        seq(seq_in),
        max_new_tokens(request.max_new_tokens),
        stop_token_ids(request.stop_token_ids),
        ignore_eos(request.ignore_eos),
        sampler(request.sampling, seq_in->tokens, seed),
        decoder(tokenizer, /*skip_special=*/!request.special_text),
        stop_matcher(request.stop_strings),
        top_logprobs(request.sampling.top_logprobs) {
    std::sort(stop_token_ids.begin(), stop_token_ids.end());
  }

  bool is_stop_token(int32_t token) const {
    return std::binary_search(stop_token_ids.begin(), stop_token_ids.end(), token);
  }

  std::shared_ptr<RequestChannel> channel;
  Sequence* seq;  // owned by the scheduler; valid until the request finishes
  int32_t max_new_tokens;
  std::vector<int32_t> stop_token_ids;  // sorted
  bool ignore_eos;
  Sampler sampler;
  StreamDecoder decoder;
  StopStringMatcher stop_matcher;
  int32_t top_logprobs;

  // Generated but not yet streamed: tokens whose text is still held back ride along with
  // the next delta that has text.
  GenerationEvent pending;
  // Where the text of each token of pending.logprobs starts in the text given to the stop
  // matcher, and how much of that text it has released: the tokens of a matched stop string
  // start past the released text, and lose their logprobs as they lose their text.
  std::vector<size_t> pending_text_starts;
  size_t text_pushed = 0;
  size_t text_released = 0;

  Clock::time_point submitted;
  Clock::time_point first_scheduled;
  Clock::time_point first_token;
  bool has_first_token = false;
  Clock::time_point deadline = Clock::time_point::max();        // request timeout
  Clock::time_point queue_deadline = Clock::time_point::max();  // until first scheduled
};

}  // namespace llamaserve
