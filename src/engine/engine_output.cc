// Engine: what happens after a token is sampled: stop checks, detokenization, stop strings,
// streaming deltas, and the one finish event of every request.
#include <spdlog/spdlog.h>

#include "engine/active_request.h"
#include "engine/engine.h"
#include "tokenizer/unicode.h"

namespace llamaserve {
std::string Engine::token_text(int32_t token) const {
  // One token may hold part of a character; its text must still be valid UTF-8.
  return unicode::sanitize_utf8(tokenizer_->token_bytes(token, /*render_special=*/true));
}

void Engine::sample_and_emit(const StepPlan& plan) {
  sampled_.clear();
  for (const ScheduledChunk& chunk : plan.chunks) {
    if (chunk.wants_logits) sampled_.emplace_back(active_.at(chunk.seq->id).get(), SampledToken{});
  }
  const auto n_vocab = static_cast<size_t>(n_vocab_);
  auto sample_rows = [&](int part, int n_parts) {
    SamplerScratch& scratch = sampler_scratch_[static_cast<size_t>(part)];
    for (size_t i = static_cast<size_t>(part); i < sampled_.size();
         i += static_cast<size_t>(n_parts)) {
      if (host_sampled_[i] == 0) {
        sampled_[i].second.token = device_tokens_[i];
        continue;
      }
      std::span<float> row(logits_.data() + i * n_vocab, n_vocab);
      sampled_[i].second = sampled_[i].first->sampler.sample(row, scratch);
    }
  };
  // Below this many rows, waking the pool costs more than it saves.
  constexpr size_t kMinRowsForThreads = 8;
  if (sampled_.size() >= kMinRowsForThreads) {
    sampler_pool_.run(sample_rows);
  } else {
    sample_rows(0, 1);
  }
  // Each sampler only touched its own request; everything after runs on this thread.
  for (auto& [active, sampled] : sampled_) on_token(*active, sampled);
}

void Engine::on_token(ActiveRequest& active, const SampledToken& sampled) {
  Sequence& seq = *active.seq;
  const int32_t token = sampled.token;
  seq.tokens.push_back(token);
  active.sampler.accept(token);
  ++counters_.generated_tokens_total;
  if (!active.has_first_token) {
    active.has_first_token = true;
    active.first_token = Clock::now();
  }

  // End-of-generation and stop tokens end the request without adding their text.
  if ((!active.ignore_eos && tokenizer_->is_end_of_generation(token)) ||
      active.is_stop_token(token)) {
    finish(seq.id, FinishReason::kStop, Status::ok(), /*flush_text=*/true);
    return;
  }

  active.pending.tokens.push_back(token);
  if (active.sampler.wants_logprobs()) {
    std::vector<TokenLogprob> entry;
    entry.reserve(sampled.top_logprobs.size() + 1);
    entry.push_back({token, token_text(token), sampled.logprob});
    for (const auto& [alternative, logprob] : sampled.top_logprobs) {
      entry.push_back({alternative, token_text(alternative), logprob});
    }
    active.pending.logprobs.push_back(std::move(entry));
    active.pending_text_starts.push_back(active.text_pushed);
  }
  const std::string piece = active.decoder.push(token);
  active.text_pushed += piece.size();
  StopStringMatcher::Output released = active.stop_matcher.push(piece);
  active.text_released += released.text.size();
  active.pending.text += released.text;
  if (released.stopped) {
    // The tokens that start at the stop string (or after it) gave no text to the output.
    while (!active.pending_text_starts.empty() &&
           active.pending_text_starts.back() >= active.text_released) {
      active.pending_text_starts.pop_back();
      active.pending.logprobs.pop_back();
    }
    finish(seq.id, FinishReason::kStop, Status::ok(), /*flush_text=*/false);
  } else if (seq.n_generated() >= active.max_new_tokens) {
    finish(seq.id, FinishReason::kLength, Status::ok(), /*flush_text=*/true);
  } else if (!active.pending.text.empty()) {
    emit_pending(active);
  }
}

void Engine::emit_pending(ActiveRequest& active) {
  active.pending.kind = GenerationEvent::Kind::kDelta;
  active.channel->push(std::move(active.pending));
  active.pending = GenerationEvent{};
  active.pending_text_starts.clear();
}

void Engine::finish(SeqId id, FinishReason reason, Status error, bool flush_text) {
  auto it = active_.find(id);
  if (it == active_.end()) return;
  ActiveRequest& active = *it->second;
  const Sequence& seq = *active.seq;
  const Clock::time_point now = Clock::now();

  if (flush_text) {
    // Bytes of an incomplete character at the very end, then text held back for a stop
    // string that never completed.
    StopStringMatcher::Output released = active.stop_matcher.push(active.decoder.flush());
    active.pending.text += released.text;
    if (!released.stopped) active.pending.text += active.stop_matcher.flush();
  }
  if (!active.pending.text.empty() || !active.pending.tokens.empty()) emit_pending(active);

  GenerationEvent event;
  event.kind = GenerationEvent::Kind::kFinish;
  event.finish_reason = reason;
  event.error = std::move(error);
  Usage& usage = event.usage;
  usage.prompt_tokens = seq.n_prompt;
  usage.completion_tokens = seq.n_generated();
  usage.queue_ms = ms_between(active.submitted, seq.ever_scheduled ? active.first_scheduled : now);
  usage.ttft_ms = active.has_first_token ? ms_between(active.submitted, active.first_token) : 0.0;
  usage.total_ms = ms_between(active.submitted, now);
  if (active.has_first_token && usage.completion_tokens > 1) {
    const double decode_ms = ms_between(active.first_token, now);
    if (decode_ms > 0)
      usage.decode_tokens_per_s = (usage.completion_tokens - 1) * 1000.0 / decode_ms;
  }
  spdlog::debug("engine: request {} finished ({}): {} prompt + {} generated tokens, {:.1f} ms",
                active.channel->id(), finish_reason_name(reason), usage.prompt_tokens,
                usage.completion_tokens, usage.total_ms);
  active.channel->push(std::move(event));

  const bool was_queued = !seq.ever_scheduled;
  active_.erase(it);
  scheduler_.remove(id);  // frees the KV blocks
  ++counters_.requests_finished;
  {
    std::lock_guard lock(inbox_->mutex);
    if (was_queued) --inbox_->n_queued;
    --inbox_->n_open;
  }
  inbox_->idle.notify_all();
}

}  // namespace llamaserve
