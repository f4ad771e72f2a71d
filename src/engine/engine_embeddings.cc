// Engine: embedding requests, from submission to their one finish event. The batcher
// (embedding_batcher.h) plans the passes; this file ties it to the inbox, the executor and the
// request channels.
#include <spdlog/spdlog.h>

#include "engine/engine.h"

namespace llamaserve {
Status Engine::validate(const EmbeddingRequest& request) const {
  if (!returns_hidden_) {
    return make_error(StatusCode::kUnsupported,
                      "embeddings need the model on one device (the CPU or one GPU); this "
                      "engine runs on {}",
                      executor_->describe());
  }
  if (request.inputs.empty()) return make_error(StatusCode::kInvalidArgument, "no inputs");
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    const std::vector<int32_t>& input = request.inputs[i];
    if (input.empty()) return make_error(StatusCode::kInvalidArgument, "input {} is empty", i);
    if (static_cast<int64_t>(input.size()) > max_context_) {
      return make_error(StatusCode::kOutOfRange,
                        "input {} has {} tokens; the context holds {} tokens", i, input.size(),
                        max_context_);
    }
    for (size_t t = 0; t < input.size(); ++t) {
      if (input[t] < 0 || input[t] >= n_vocab_) {
        return make_error(StatusCode::kInvalidArgument,
                          "token {} at position {} of input {} is outside the vocabulary [0, {})",
                          input[t], t, i, n_vocab_);
      }
    }
  }
  if (request.timeout.count() < 0 || request.queue_timeout.count() < 0) {
    return make_error(StatusCode::kInvalidArgument, "timeouts must be >= 0");
  }
  return Status::ok();
}

Result<RequestHandle> Engine::submit_embedding(EmbeddingRequest request) {
  LS_RETURN_IF_ERROR(validate(request));
  IncomingEmbedding incoming;
  incoming.submitted = Clock::now();
  request.id = request_id(std::move(request.id), "emb");
  incoming.channel = new_channel(request.id);
  incoming.request = std::move(request);
  return enqueue(&Inbox::incoming_embeddings, std::move(incoming));
}

void Engine::start_embedding(IncomingEmbedding incoming) {
  auto job = std::make_unique<EmbeddingJob>();
  job->channel = std::move(incoming.channel);
  job->inputs = std::move(incoming.request.inputs);
  job->pooling = incoming.request.pooling;
  for (const auto& input : job->inputs) job->n_prompt_tokens += static_cast<int32_t>(input.size());
  job->submitted = incoming.submitted;
  if (incoming.request.timeout.count() > 0) {
    job->deadline = incoming.submitted + incoming.request.timeout;
  }
  if (incoming.request.queue_timeout.count() > 0) {
    job->queue_deadline = incoming.submitted + incoming.request.queue_timeout;
  }
  spdlog::debug("engine: embedding request {} ({} inputs, {} tokens, {} pooling) queued",
                job->channel->id(), job->inputs.size(), job->n_prompt_tokens,
                embedding_pooling_name(job->pooling));
  counters_.prompt_tokens_total += static_cast<uint64_t>(job->n_prompt_tokens);
  embeddings_.add(std::move(job));
}

void Engine::sweep_embeddings(bool cancel_all, Clock::time_point now) {
  std::vector<std::pair<const EmbeddingJob*, FinishReason>> to_finish;
  for (const auto& job : embeddings_.jobs()) {
    if (cancel_all || job->channel->cancel_requested()) {
      to_finish.emplace_back(job.get(), FinishReason::kCancelled);
    } else if (now >= job->deadline || (!job->started && now >= job->queue_deadline)) {
      to_finish.emplace_back(job.get(), FinishReason::kTimeout);
    }
  }
  for (const auto& [job, reason] : to_finish) {
    Status error;
    if (reason == FinishReason::kCancelled) {
      error =
          Status(StatusCode::kCancelled, cancel_all ? "cancelled by drain timeout" : "cancelled");
    } else if (job->started) {
      error = Status(StatusCode::kDeadlineExceeded, "the request ran past its timeout");
    } else {
      error =
          Status(StatusCode::kDeadlineExceeded, "the request waited in the queue past its timeout");
    }
    finish_embedding(embeddings_.remove(job), reason, std::move(error));
  }
}

void Engine::run_embedding_pass() {
  embeddings_started_.clear();
  if (!embeddings_.plan(batch_, next_seq_id_, embeddings_started_)) {
    // Every free block is taken by generations; they free some as they finish. Back off
    // unless a generation step runs anyway.
    if (scheduler_.idle()) {
      std::unique_lock lock(inbox_->mutex);
      inbox_->wake.wait_for(lock, std::chrono::milliseconds(1));
    }
    return;
  }
  if (!embeddings_started_.empty()) {
    const Clock::time_point now = Clock::now();
    for (EmbeddingJob* job : embeddings_started_) job->first_scheduled = now;
    std::lock_guard lock(inbox_->mutex);
    inbox_->n_queued -= static_cast<int32_t>(embeddings_started_.size());
  }
  hidden_.resize(batch_.logit_rows.size() * static_cast<size_t>(executor_->config().n_embd));
  const Status status = executor_->forward_hidden(batch_, hidden_);
  ++counters_.steps_total;
  embeddings_finished_.clear();
  if (!status.is_ok()) {
    spdlog::error("engine: embedding pass over {} tokens failed: {}", batch_.n_tokens(),
                  status.to_string());
    embeddings_.fail_planned(embeddings_finished_);
    for (auto& job : embeddings_finished_) {
      finish_embedding(std::move(job), FinishReason::kError, status.with_context("forward pass"));
    }
    embeddings_finished_.clear();
    return;
  }
  embeddings_.complete(hidden_, embeddings_finished_);
  for (auto& job : embeddings_finished_) {
    finish_embedding(std::move(job), FinishReason::kStop, Status::ok());
  }
  embeddings_finished_.clear();
}

void Engine::finish_embedding(std::unique_ptr<EmbeddingJob> job, FinishReason reason,
                              Status error) {
  if (!job) return;
  const Clock::time_point now = Clock::now();
  GenerationEvent event;
  event.kind = GenerationEvent::Kind::kFinish;
  event.finish_reason = reason;
  event.error = std::move(error);
  event.usage.prompt_tokens = job->n_prompt_tokens;
  event.usage.queue_ms = ms_between(job->submitted, job->started ? job->first_scheduled : now);
  event.usage.total_ms = ms_between(job->submitted, now);
  if (reason == FinishReason::kStop) event.embeddings = std::move(job->embeddings);
  spdlog::debug("engine: embedding request {} finished ({}): {} inputs, {} tokens, {:.1f} ms",
                job->channel->id(), finish_reason_name(reason), job->inputs.size(),
                job->n_prompt_tokens, event.usage.total_ms);
  job->channel->push(std::move(event));
  ++counters_.requests_finished;
  {
    std::lock_guard lock(inbox_->mutex);
    if (!job->started) --inbox_->n_queued;
    --inbox_->n_open;
  }
  inbox_->idle.notify_all();
}

}  // namespace llamaserve
