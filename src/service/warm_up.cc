#include "service/warm_up.h"

#include <algorithm>
#include <chrono>

#include <spdlog/spdlog.h>

#include "engine/generate.h"

namespace llamaserve {

std::vector<WarmupWave> warmup_waves(const WarmupLimits& limits) {
  std::vector<WarmupWave> waves;
  if (limits.tokens <= 0) return waves;
  const int32_t longest =
      std::max(1, std::min(limits.max_batch_tokens, limits.max_context - limits.tokens));
  if (!limits.every_shape) {
    waves.push_back({{std::min(4, longest)}, limits.tokens, false});
    return waves;
  }
  for (int32_t rows = 1;; rows *= 2) {
    waves.push_back({{std::min(rows, longest)}, limits.tokens, false});
    if (rows >= longest) break;
  }
  const int32_t widest = std::max(1, std::min(limits.max_running, limits.max_waiting));
  for (int32_t seqs = 2;; seqs *= 2) {
    const int32_t n = std::min(seqs, widest);
    // Admission takes ceil(n / max_batch_tokens) steps of one-token prompts; the first
    // sequences keep generating until the last one joins them.
    const int32_t admission_steps = (n + limits.max_batch_tokens - 1) / limits.max_batch_tokens;
    waves.push_back({std::vector<int32_t>(static_cast<size_t>(n), 1),
                     std::min(limits.tokens + admission_steps, limits.max_context - 1), false});
    if (n >= widest) break;
  }
  waves.back().random_sampling = true;
  return waves;
}

namespace {

// A prompt of valid token ids that shares no prefix with the other warm-up prompts (so the
// prefix cache cannot shorten the pass): ids stepped by a large prime from a per-request start.
std::vector<int32_t> warmup_prompt(int32_t n_tokens, int32_t n_vocab, uint32_t salt) {
  std::vector<int32_t> tokens(static_cast<size_t>(n_tokens));
  for (int32_t i = 0; i < n_tokens; ++i) {
    tokens[static_cast<size_t>(i)] = static_cast<int32_t>(
        (static_cast<uint64_t>(salt) * 104729u + static_cast<uint64_t>(i) * 7919u) %
        static_cast<uint64_t>(n_vocab));
  }
  return tokens;
}

// Waits for a warm-up request's end; anything but a normal one fails the warm-up.
Status await(RequestHandle handle) {
  const std::string id = handle.id();
  LS_ASSIGN_OR_RETURN(const Completion done,
                      read_to_end(std::move(handle), {}, std::chrono::minutes(10)));
  if (done.finish_reason == FinishReason::kLength || done.finish_reason == FinishReason::kStop) {
    return Status::ok();
  }
  return done.error.is_ok() ? make_error(StatusCode::kInternal, "{} ended with '{}'", id,
                                         finish_reason_name(done.finish_reason))
                            : done.error.with_context(id);
}

}  // namespace

Status warm_up(EngineGroup& engines, const WarmupLimits& limits) {
  const auto n_vocab = static_cast<int32_t>(engines.model_config().n_vocab);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<WarmupWave> waves = warmup_waves(limits);
  uint32_t salt = 1;
  for (const WarmupWave& wave : waves) {
    std::vector<RequestHandle> handles;
    for (size_t replica = 0; replica < engines.size(); ++replica) {
      for (size_t i = 0; i < wave.prompt_tokens.size(); ++i) {
        GenerationRequest request;
        request.id = engines.size() == 1 ? fmt::format("warmup-{}", salt)
                                         : fmt::format("warmup-{}-{}", replica, salt);
        request.prompt_tokens = warmup_prompt(wave.prompt_tokens[i], n_vocab, salt++);
        request.max_new_tokens = wave.max_new_tokens;
        request.ignore_eos = true;
        request.sampling.temperature = 0.0f;
        if (wave.random_sampling && i == 0) {
          request.sampling.temperature = 0.8f;
          request.sampling.top_k = 40;
          request.sampling.top_p = 0.95f;
          request.sampling.seed = 1;
        }
        LS_ASSIGN_OR_RETURN(RequestHandle handle, engines.submit_to(replica, std::move(request)));
        handles.push_back(std::move(handle));
      }
    }
    for (RequestHandle& handle : handles) LS_RETURN_IF_ERROR(await(std::move(handle)));
  }
  spdlog::debug(
      "warm-up: {} waves on {} replicas in {:.0f} ms", waves.size(), engines.size(),
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  return Status::ok();
}

}  // namespace llamaserve
