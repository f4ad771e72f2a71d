// Engine: construction, submission, the step loop, drain and shutdown. What happens to a
// request's output once a token is sampled lives in engine_output.cc.
#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <random>

#include <spdlog/spdlog.h>

#include "engine/active_request.h"
#include "tokenizer/tokenizer.h"

namespace llamaserve {
namespace {

// Past this many alternatives per token the cost is all sorting and the output is noise.
constexpr int32_t kMaxTopLogprobs = 20;

Status validate_sampling(const SamplingParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0.0f) {
    return make_error(StatusCode::kInvalidArgument, "temperature must be >= 0, got {}",
                      p.temperature);
  }
  if (p.top_k < 0)
    return make_error(StatusCode::kInvalidArgument, "top_k must be >= 0, got {}", p.top_k);
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    return make_error(StatusCode::kInvalidArgument, "top_p must be in (0, 1], got {}", p.top_p);
  }
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) {
    return make_error(StatusCode::kInvalidArgument, "min_p must be in [0, 1], got {}", p.min_p);
  }
  if (!std::isfinite(p.repetition_penalty) || p.repetition_penalty <= 0.0f) {
    return make_error(StatusCode::kInvalidArgument, "repetition_penalty must be > 0, got {}",
                      p.repetition_penalty);
  }
  if (!std::isfinite(p.presence_penalty) || !std::isfinite(p.frequency_penalty)) {
    return make_error(StatusCode::kInvalidArgument,
                      "presence and frequency penalties must be finite");
  }
  if (p.top_logprobs < 0 || p.top_logprobs > kMaxTopLogprobs) {
    return make_error(StatusCode::kInvalidArgument, "top_logprobs must be in [0, {}], got {}",
                      kMaxTopLogprobs, p.top_logprobs);
  }
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::create(std::unique_ptr<Executor> executor,
                                               std::shared_ptr<const Tokenizer> tokenizer,
                                               const EngineConfig& config) {
  if (!executor) return make_error(StatusCode::kInvalidArgument, "engine: no executor");
  if (!tokenizer) return make_error(StatusCode::kInvalidArgument, "engine: no tokenizer");
  if (config.max_running < 1 || config.max_batch_tokens < 1 || config.max_waiting < 0 ||
      config.max_context < 0 || config.sampler_threads < 0 || config.max_embedding_seqs < 1 ||
      config.prefill_chunk_tokens < 0 || config.prefill_context_per_row < 0) {
    return make_error(StatusCode::kInvalidArgument,
                      "engine: max_running ({}), max_batch_tokens ({}) and max_embedding_seqs ({}) "
                      "must be >= 1, max_waiting ({}), max_context ({}), sampler_threads ({}), "
                      "prefill_chunk_tokens ({}) and prefill_context_per_row ({}) >= 0",
                      config.max_running, config.max_batch_tokens, config.max_embedding_seqs,
                      config.max_waiting, config.max_context, config.sampler_threads,
                      config.prefill_chunk_tokens, config.prefill_context_per_row);
  }
  const KvCacheInfo kv = executor->kv_info();
  if (kv.n_blocks < 1 || kv.block_size < 1) {
    return make_error(StatusCode::kInvalidArgument,
                      "engine: the executor's KV cache has {} blocks of {} tokens", kv.n_blocks,
                      kv.block_size);
  }
  if (executor->config().n_vocab < 1) {
    return make_error(StatusCode::kInvalidArgument, "engine: the model has no vocabulary");
  }
  const int64_t kv_capacity = static_cast<int64_t>(kv.n_blocks) * kv.block_size;
  int64_t max_context =
      config.max_context > 0 ? config.max_context : executor->config().n_ctx_train;
  if (max_context <= 0) max_context = kv_capacity;
  if (max_context > kv_capacity) {
    spdlog::info("engine: context clipped from {} to {} tokens, what the KV cache holds",
                 max_context, kv_capacity);
    max_context = kv_capacity;
  }
  return std::unique_ptr<Engine>(new Engine(std::move(executor), std::move(tokenizer), config,
                                            static_cast<int32_t>(max_context)));
}

Engine::Engine(std::unique_ptr<Executor> executor, std::shared_ptr<const Tokenizer> tokenizer,
               const EngineConfig& config, int32_t max_context)
    : executor_(std::move(executor)),
      tokenizer_(std::move(tokenizer)),
      config_(config),
      max_context_(max_context),
      n_vocab_(static_cast<int32_t>(executor_->config().n_vocab)),
      returns_hidden_(executor_->returns_hidden()),
      inbox_(std::make_shared<Inbox>()),
      blocks_(executor_->kv_info().n_blocks, executor_->kv_info().block_size,
              config.prefix_caching),
      scheduler_(SchedulerConfig{config.max_running, config.max_batch_tokens,
                                 config.prefill_chunk_tokens, config.prefill_context_per_row},
                 blocks_),
      sampler_pool_(config.sampler_threads > 0 ? config.sampler_threads
                                               : std::min(4, ThreadPool::default_threads())),
      sampler_scratch_(static_cast<size_t>(sampler_pool_.size())),
      embeddings_(blocks_, config.max_batch_tokens, config.max_embedding_seqs,
                  static_cast<int32_t>(executor_->config().n_embd)) {
  logits_.reserve(static_cast<size_t>(config_.max_running) * static_cast<size_t>(n_vocab_));
  publish_stats();
  thread_ = std::thread([this] { run_loop(); });
}

Engine::~Engine() { shutdown(); }

void Engine::shutdown() {
  std::call_once(shutdown_once_, [this] {
    {
      std::lock_guard lock(inbox_->mutex);
      inbox_->stop = true;
      inbox_->draining = true;
    }
    inbox_->wake.notify_all();
    if (thread_.joinable()) thread_.join();
  });
}

std::string Engine::describe() const {
  const KvCacheInfo kv = executor_->kv_info();
  return fmt::format(
      "{}; KV cache {} blocks x {} tokens, prefix caching {}; context {}; max running {}, "
      "batch {} tokens, prompt chunks beside decodes {}",
      executor_->describe(), kv.n_blocks, kv.block_size, config_.prefix_caching ? "on" : "off",
      max_context_, config_.max_running, config_.max_batch_tokens,
      config_.prefill_chunk_tokens > 0
          ? fmt::format(
                "{} tokens{}", config_.prefill_chunk_tokens,
                config_.prefill_context_per_row > 0
                    ? fmt::format(", a row 1 + context / {}", config_.prefill_context_per_row)
                    : std::string())
          : std::string("unbounded"));
}

Status Engine::validate(const GenerationRequest& request) const {
  const auto n_prompt = static_cast<int64_t>(request.prompt_tokens.size());
  if (n_prompt == 0) return make_error(StatusCode::kInvalidArgument, "the prompt is empty");
  for (size_t i = 0; i < request.prompt_tokens.size(); ++i) {
    int32_t token = request.prompt_tokens[i];
    if (token < 0 || token >= n_vocab_) {
      return make_error(StatusCode::kInvalidArgument,
                        "prompt token {} at position {} is outside the vocabulary [0, {})", token,
                        i, n_vocab_);
    }
  }
  for (int32_t token : request.stop_token_ids) {
    if (token < 0 || token >= n_vocab_) {
      return make_error(StatusCode::kInvalidArgument,
                        "stop token {} is outside the vocabulary [0, {})", token, n_vocab_);
    }
  }
  if (request.max_new_tokens < 1) {
    return make_error(StatusCode::kInvalidArgument, "max_new_tokens must be >= 1, got {}",
                      request.max_new_tokens);
  }
  if (n_prompt + request.max_new_tokens > max_context_) {
    return make_error(StatusCode::kOutOfRange,
                      "the prompt ({} tokens) plus max_new_tokens ({}) exceeds the context of "
                      "{} tokens",
                      n_prompt, request.max_new_tokens, max_context_);
  }
  if (request.sampling.constraint &&
      request.sampling.constraint->vocabulary().n_vocab() != tokenizer_->n_vocab()) {
    return make_error(StatusCode::kInvalidArgument,
                      "the response-format constraint was built for a vocabulary of {} tokens, "
                      "not this model's {}",
                      request.sampling.constraint->vocabulary().n_vocab(), tokenizer_->n_vocab());
  }
  if (request.timeout.count() < 0 || request.queue_timeout.count() < 0) {
    return make_error(StatusCode::kInvalidArgument, "timeouts must be >= 0");
  }
  return validate_sampling(request.sampling);
}

Result<RequestHandle> Engine::submit(GenerationRequest request) {
  LS_RETURN_IF_ERROR(validate(request));
  IncomingRequest incoming;
  incoming.submitted = Clock::now();
  incoming.seed = request.sampling.seed ? *request.sampling.seed : std::random_device{}();
  request.id = request_id(std::move(request.id), "req");
  incoming.channel = new_channel(request.id);
  incoming.request = std::move(request);
  return enqueue(&Inbox::incoming, std::move(incoming));
}

std::string Engine::request_id(std::string id, std::string_view prefix) {
  if (!id.empty()) return id;
  return fmt::format("{}-{}", prefix, next_request_number_.fetch_add(1, std::memory_order_relaxed));
}

std::shared_ptr<RequestChannel> Engine::new_channel(std::string id) const {
  std::weak_ptr<Inbox> weak_inbox = inbox_;
  return std::make_shared<RequestChannel>(std::move(id), [weak_inbox] {
    if (auto inbox = weak_inbox.lock()) {
      {
        std::lock_guard lock(inbox->mutex);
        inbox->cancel_pending = true;
      }
      inbox->wake.notify_all();
    }
  });
}

Status Engine::admit_locked() {
  if (inbox_->draining) {
    return make_error(StatusCode::kUnavailable, "the engine is {}",
                      inbox_->stop ? "shut down" : "draining");
  }
  if (inbox_->n_queued >= config_.max_waiting) {
    return make_error(StatusCode::kResourceExhausted,
                      "{} requests are already waiting (the limit); retry later", inbox_->n_queued);
  }
  ++inbox_->n_queued;
  ++inbox_->n_open;
  return Status::ok();
}

EngineStats Engine::stats() const {
  std::lock_guard lock(stats_mutex_);
  return stats_;
}

int32_t Engine::open_requests() const {
  std::lock_guard lock(inbox_->mutex);
  return inbox_->n_open;
}

Status Engine::drain(std::chrono::milliseconds timeout) {
  std::unique_lock lock(inbox_->mutex);
  inbox_->draining = true;
  if (inbox_->idle.wait_for(lock, timeout, [&] { return inbox_->n_open == 0; }))
    return Status::ok();
  const int32_t n_cancelled = inbox_->n_open;
  inbox_->cancel_all = true;
  inbox_->wake.notify_all();
  // Cancellation takes effect within one step; shutdown also ends every request.
  inbox_->idle.wait(lock, [&] { return inbox_->n_open == 0; });
  return make_error(StatusCode::kDeadlineExceeded,
                    "{} requests were still open after {} ms and were cancelled", n_cancelled,
                    timeout.count());
}

void Engine::run_loop() {
  std::deque<IncomingRequest> incoming;
  std::deque<IncomingEmbedding> incoming_embeddings;
  while (true) {
    bool cancel_all = false;
    {
      std::unique_lock lock(inbox_->mutex);
      inbox_->wake.wait(lock, [&] {
        return inbox_->stop || !inbox_->incoming.empty() || !inbox_->incoming_embeddings.empty() ||
               inbox_->cancel_pending || inbox_->cancel_all || !scheduler_.idle() ||
               !embeddings_.idle();
      });
      if (inbox_->stop) break;
      incoming.swap(inbox_->incoming);
      incoming_embeddings.swap(inbox_->incoming_embeddings);
      inbox_->cancel_pending = false;
      cancel_all = inbox_->cancel_all;
      inbox_->cancel_all = false;
    }
    while (!incoming.empty()) {
      start_request(std::move(incoming.front()));
      incoming.pop_front();
    }
    while (!incoming_embeddings.empty()) {
      start_embedding(std::move(incoming_embeddings.front()));
      incoming_embeddings.pop_front();
    }
    sweep_cancellations_and_timeouts(cancel_all);
    if (!scheduler_.idle()) run_step();
    // One embedding pass per iteration, between generation steps: decodes keep flowing.
    if (!embeddings_.idle()) run_embedding_pass();
    publish_stats();
  }
  finish_everything_on_shutdown();
  publish_stats();
}

void Engine::start_request(IncomingRequest incoming) {
  auto seq = std::make_unique<Sequence>();
  seq->id = next_seq_id_++;
  seq->tokens = std::move(incoming.request.prompt_tokens);
  seq->n_prompt = seq->n_tokens();
  auto active = std::make_unique<ActiveRequest>(incoming.request, std::move(incoming.channel),
                                                seq.get(), incoming.seed, *tokenizer_);
  active->submitted = incoming.submitted;
  if (incoming.request.timeout.count() > 0) {
    active->deadline = incoming.submitted + incoming.request.timeout;
  }
  if (incoming.request.queue_timeout.count() > 0) {
    active->queue_deadline = incoming.submitted + incoming.request.queue_timeout;
  }
  spdlog::debug("engine: request {} ({} prompt tokens, up to {} new) queued as sequence {}",
                active->channel->id(), seq->n_prompt, active->max_new_tokens, seq->id);
  counters_.prompt_tokens_total += static_cast<uint64_t>(seq->n_prompt);
  active_.emplace(seq->id, std::move(active));
  scheduler_.add(std::move(seq));
}

void Engine::sweep_cancellations_and_timeouts(bool cancel_all) {
  const Clock::time_point now = Clock::now();
  std::vector<std::pair<SeqId, FinishReason>> to_finish;
  for (const auto& [id, active] : active_) {
    if (cancel_all || active->channel->cancel_requested()) {
      to_finish.emplace_back(id, FinishReason::kCancelled);
    } else if (now >= active->deadline ||
               (!active->seq->ever_scheduled && now >= active->queue_deadline)) {
      to_finish.emplace_back(id, FinishReason::kTimeout);
    }
  }
  for (const auto& [id, reason] : to_finish) {
    const ActiveRequest& active = *active_.at(id);
    Status error;
    if (reason == FinishReason::kCancelled) {
      error =
          Status(StatusCode::kCancelled, cancel_all ? "cancelled by drain timeout" : "cancelled");
    } else if (active.seq->ever_scheduled) {
      error = Status(StatusCode::kDeadlineExceeded, "the request ran past its timeout");
    } else {
      error =
          Status(StatusCode::kDeadlineExceeded, "the request waited in the queue past its timeout");
    }
    finish(id, reason, std::move(error), /*flush_text=*/reason == FinishReason::kTimeout);
  }
  sweep_embeddings(cancel_all, now);
}

void Engine::run_step() {
  const Clock::time_point step_start = Clock::now();
  StepPlan plan = scheduler_.schedule();
  counters_.preemptions_total = scheduler_.preemptions_total();
  if (!plan.first_admitted.empty()) {
    const Clock::time_point now = Clock::now();
    for (Sequence* seq : plan.first_admitted) active_.at(seq->id)->first_scheduled = now;
    std::lock_guard lock(inbox_->mutex);
    inbox_->n_queued -= static_cast<int32_t>(plan.first_admitted.size());
  }
  for (Sequence* seq : plan.preempted) {
    spdlog::debug("engine: sequence {} preempted ({} tokens to recompute)", seq->id,
                  seq->n_tokens());
  }
  if (plan.empty()) {
    // Cannot happen while the context limit keeps every sequence within the cache; if it
    // does, back off instead of spinning.
    std::unique_lock lock(inbox_->mutex);
    inbox_->wake.wait_for(lock, std::chrono::milliseconds(1));
    return;
  }

  build_batch(plan, blocks_, batch_);
  const Clock::time_point forward_start = Clock::now();
  Status status = forward_step(plan);
  const Clock::time_point forward_end = Clock::now();
  counters_.forward_seconds_total +=
      std::chrono::duration<double>(forward_end - forward_start).count();
  ++counters_.steps_total;
  if (!status.is_ok()) {
    spdlog::error("engine: forward pass over {} sequences failed: {}", plan.chunks.size(),
                  status.to_string());
    Status error = status.with_context("forward pass");
    for (const ScheduledChunk& chunk : plan.chunks) {
      finish(chunk.seq->id, FinishReason::kError, error, /*flush_text=*/false);
    }
    return;
  }
  bool decodes = false, prompts = false;
  for (const ScheduledChunk& chunk : plan.chunks) {
    (chunk.seq->n_pending() == 1 ? decodes : prompts) = true;
  }
  const StepKind kind =
      decodes ? (prompts ? StepKind::kMixed : StepKind::kDecode) : StepKind::kPrompt;
  scheduler_.complete(plan);
  sample_and_emit(plan);
  const double seconds = std::chrono::duration<double>(Clock::now() - step_start).count();
  counters_.step_seconds_total += seconds;
  counters_.step_durations[static_cast<int>(kind)].observe(seconds);
}

Status Engine::forward_step(const StepPlan& plan) {
  const size_t n_rows = batch_.logit_rows.size();
  const auto n_vocab = static_cast<size_t>(n_vocab_);
  host_sampled_.assign(n_rows, 1);
  if (!config_.device_sampling || !executor_->samples_on_device()) {
    logits_.resize(n_rows * n_vocab);
    return executor_->forward(batch_, logits_);
  }
  // Logit rows follow the chunks that want logits (build_batch); a row the device cannot
  // sample gets a greedy placeholder and the host samples it from the logits.
  row_sampling_.clear();
  bool any_host = false;
  for (const ScheduledChunk& chunk : plan.chunks) {
    if (!chunk.wants_logits) continue;
    ActiveRequest& active = *active_.at(chunk.seq->id);
    const std::optional<RowSampling> row =
        active.sampler.device_sampling(static_cast<uint64_t>(chunk.seq->n_generated()));
    host_sampled_[row_sampling_.size()] = row ? 0 : 1;
    any_host = any_host || !row;
    row_sampling_.push_back(row.value_or(RowSampling{}));
  }
  device_tokens_.resize(n_rows);
  logits_.resize(any_host ? n_rows * n_vocab : 0);
  ++counters_.device_sampled_steps_total;
  return executor_->forward_sampled(batch_, row_sampling_, device_tokens_, logits_);
}

void Engine::publish_stats() {
  EngineStats snapshot = counters_;
  snapshot.waiting = scheduler_.n_waiting();
  snapshot.running = scheduler_.n_running();
  snapshot.kv_blocks_total = blocks_.n_blocks();
  snapshot.kv_blocks_free = blocks_.n_free();
  snapshot.kv_blocks_cached = blocks_.n_cached_free();
  const PrefixCacheStats& prefix = scheduler_.prefix_cache_stats();
  snapshot.prefix_cache_queries_total = prefix.queries;
  snapshot.prefix_cache_query_tokens_total = prefix.query_tokens;
  snapshot.prefix_cache_hit_tokens_total = prefix.hit_tokens;
  snapshot.prefix_cache_evictions_total = blocks_.evictions_total();
  const int32_t embeddings_waiting = embeddings_.n_waiting();
  snapshot.waiting += embeddings_waiting;
  snapshot.running += static_cast<int32_t>(embeddings_.jobs().size()) - embeddings_waiting;
  {
    std::lock_guard lock(inbox_->mutex);
    snapshot.waiting +=
        static_cast<int32_t>(inbox_->incoming.size() + inbox_->incoming_embeddings.size());
  }
  std::lock_guard lock(stats_mutex_);
  stats_ = snapshot;
}

void Engine::finish_everything_on_shutdown() {
  std::deque<IncomingRequest> never_started;
  std::deque<IncomingEmbedding> embeddings_never_started;
  {
    std::lock_guard lock(inbox_->mutex);
    never_started.swap(inbox_->incoming);
    embeddings_never_started.swap(inbox_->incoming_embeddings);
  }
  for (IncomingRequest& incoming : never_started) start_request(std::move(incoming));
  for (IncomingEmbedding& incoming : embeddings_never_started) {
    start_embedding(std::move(incoming));
  }
  while (!embeddings_.idle()) {
    finish_embedding(embeddings_.remove(embeddings_.jobs().front().get()), FinishReason::kCancelled,
                     Status(StatusCode::kUnavailable, "the engine shut down"));
  }
  std::vector<SeqId> ids;
  for (const auto& [id, active] : active_) ids.push_back(id);
  for (SeqId id : ids) {
    finish(id, FinishReason::kCancelled, Status(StatusCode::kUnavailable, "the engine shut down"),
           /*flush_text=*/false);
  }
}

}  // namespace llamaserve
