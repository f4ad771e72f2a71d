// The public face of the engine: what a caller submits, what it gets back, and the handle
// it reads events from. The server, the CLI and the JNI binding all use exactly this.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace llamaserve {

namespace grammar {
class Constraint;
}

struct SamplingParams {
  float temperature = 1.0f;         // 0 = greedy
  int32_t top_k = 0;                // 0 = off
  float top_p = 1.0f;               // 1 = off
  float min_p = 0.0f;               // 0 = off
  float repetition_penalty = 1.0f;  // 1 = off; applied to every token seen (prompt + output)
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::optional<uint64_t> seed;  // same seed, same prompt, same params -> same output
  int32_t top_logprobs = 0;      // > 0: return this many alternatives per token
  bool logprobs = false;
  // Structured output (grammar/constraint.h): tokens that cannot continue a valid document
  // are masked before anything else; end-of-generation only once the document is complete.
  // Compiled once and shared by every request with the same response format; each request
  // keeps its own place in it.
  std::shared_ptr<const grammar::Constraint> constraint;
};

struct GenerationRequest {
  std::string id;                      // for logs; generated when empty
  std::vector<int32_t> prompt_tokens;  // already tokenized (chat template applied by the caller)
  int32_t max_new_tokens = 256;
  SamplingParams sampling;
  std::vector<std::string> stop_strings;  // never emitted; matched across token boundaries
  std::vector<int32_t> stop_token_ids;    // in addition to the model's end-of-generation ids
  bool ignore_eos = false;
  // Control tokens' text is part of the output ("<|python_tag|>", "[TOOL_CALLS]": the
  // markers of tool calls); end-of-generation tokens still add nothing.
  bool special_text = false;
  // Wall-clock limits from submit(); zero = none.
  std::chrono::milliseconds timeout{0};
  std::chrono::milliseconds queue_timeout{0};
};

// How the final hidden states of an embedding input become one vector: the mean over every
// token, or the last token's (models trained for it, whose last token sees the whole input).
enum class EmbeddingPooling { kMean, kLast };
const char* embedding_pooling_name(EmbeddingPooling pooling);
// "mean" or "last"; nullopt for anything else.
std::optional<EmbeddingPooling> parse_embedding_pooling(std::string_view name);

// Embeddings of several inputs: each input runs as its own sequence (no generation), and the
// final-normed hidden states of its tokens are pooled and L2-normalized. The request's one
// event is its kFinish, carrying GenerationEvent::embeddings.
struct EmbeddingRequest {
  std::string id;                            // for logs; generated when empty
  std::vector<std::vector<int32_t>> inputs;  // already tokenized; each at most max_context()
  EmbeddingPooling pooling = EmbeddingPooling::kMean;
  // Wall-clock limits from submit(); zero = none.
  std::chrono::milliseconds timeout{0};
  std::chrono::milliseconds queue_timeout{0};
};

enum class FinishReason { kNone, kStop, kLength, kCancelled, kError, kTimeout };
const char* finish_reason_name(FinishReason reason);

struct TokenLogprob {
  int32_t token = 0;
  std::string text;
  float logprob = 0.0f;
};

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  double queue_ms = 0;  // submit -> first scheduled
  double ttft_ms = 0;   // submit -> first token
  double total_ms = 0;  // submit -> finish
  double decode_tokens_per_s = 0;
};

// One event on a request's stream. A stream is any number of kDelta events followed by
// exactly one kFinish event.
struct GenerationEvent {
  enum class Kind { kDelta, kFinish } kind = Kind::kDelta;
  std::string text;                                  // kDelta: UTF-8 text (never a broken sequence)
  std::vector<int32_t> tokens;                       // kDelta: the tokens this text came from
  std::vector<std::vector<TokenLogprob>> logprobs;   // kDelta with logprobs: per token, the
                                                     // chosen one first, then the alternatives
  FinishReason finish_reason = FinishReason::kNone;  // kFinish
  Status error;                                      // kFinish with kError/kTimeout: why
  Usage usage;                                       // kFinish
  // kFinish(kStop) of an EmbeddingRequest: one unit-length n_embd row per input, in order,
  // row-major. Usage then counts the inputs' tokens as prompt tokens.
  std::vector<float> embeddings;
};

class RequestChannel;  // engine internal

// Returned by Engine::submit. Thread-safe; destroying it cancels the request if still running.
class RequestHandle {
 public:
  explicit RequestHandle(std::shared_ptr<RequestChannel> channel);
  ~RequestHandle();
  RequestHandle(RequestHandle&&) noexcept;
  RequestHandle& operator=(RequestHandle&&) noexcept;

  const std::string& id() const;
  // Blocks until the next event, or until `timeout` passes (then nullopt). After the finish
  // event has been returned, returns nullopt at once.
  std::optional<GenerationEvent> next(std::chrono::milliseconds timeout = std::chrono::hours(24));
  // Asks the engine to stop the request at its next step; a kFinish(kCancelled) follows.
  void cancel();
  bool finished() const;

 private:
  std::shared_ptr<RequestChannel> channel_;
};

// What a step computes: decodes only, decodes beside prompt chunks, or prompt chunks only (a
// one-token prompt chunk counts as a decode: one row).
enum class StepKind { kDecode, kMixed, kPrompt };
inline constexpr int kStepKinds = 3;

// Upper bounds (seconds) of the step-duration buckets, and the steps of one kind by bucket:
// buckets[i] counts steps in (bound i-1, bound i], the last one those past every bound.
inline constexpr std::array<double, 14> kStepSecondsBounds = {
    0.001, 0.002, 0.004, 0.006, 0.008, 0.010, 0.0125, 0.015, 0.02, 0.03, 0.05, 0.1, 0.25, 1.0};
struct StepDurations {
  std::array<uint64_t, kStepSecondsBounds.size() + 1> buckets{};
  uint64_t count = 0;
  double seconds_total = 0;
  void observe(double seconds);
};

struct EngineStats {
  int32_t waiting = 0;
  int32_t running = 0;
  int32_t kv_blocks_total = 0;
  int32_t kv_blocks_free = 0;    // allocatable, cached ones included
  int32_t kv_blocks_cached = 0;  // free blocks that still hold a reusable prompt prefix
  uint64_t requests_finished = 0;
  uint64_t prompt_tokens_total = 0;
  uint64_t generated_tokens_total = 0;
  uint64_t preemptions_total = 0;
  uint64_t steps_total = 0;
  uint64_t device_sampled_steps_total = 0;  // steps whose tokens were drawn on the device
  // Wall time of the steps, and of their forward passes (the executor's part): the rest is
  // the engine's own work per step (scheduling, sampling on the host, streaming).
  double step_seconds_total = 0;
  double forward_seconds_total = 0;
  // The same steps by kind (StepKind) and duration: the inter-token gap a stream sees is its
  // step's, so the slow kinds show where a latency tail comes from.
  std::array<StepDurations, kStepKinds> step_durations{};
  // Prefix caching: admissions that looked up the cache, their tokens, the tokens found there
  // (not computed again), and cached blocks overwritten to make room.
  uint64_t prefix_cache_queries_total = 0;
  uint64_t prefix_cache_query_tokens_total = 0;
  uint64_t prefix_cache_hit_tokens_total = 0;
  uint64_t prefix_cache_evictions_total = 0;
};

// Adds `part` to `total`, gauges and counters alike.
void add_engine_stats(EngineStats& total, const EngineStats& part);

}  // namespace llamaserve
