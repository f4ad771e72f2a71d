// Engine: one model instance serving many concurrent requests with continuous batching.
//
// Threads: any number of callers submit() and read their RequestHandles; one engine thread
// (owned here) runs the step loop: take new requests and cancellations, schedule a step,
// run the executor, sample, stream events. The engine thread is the only one that touches
// the executor, the scheduler, the KV bookkeeping and the per-request samplers; callers and
// the engine thread meet only in the inbox (one mutex) and in each request's channel.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backend/batch.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/block_manager.h"
#include "engine/embedding_batcher.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "executor/executor.h"

namespace llamaserve {

class Tokenizer;
struct ActiveRequest;

struct EngineConfig {
  int32_t max_running = 64;        // sequences decoded together
  int32_t max_waiting = 256;       // submitted but not yet scheduled; more -> kResourceExhausted
  int32_t max_batch_tokens = 512;  // token rows per forward pass (prefill is chunked to fit)
  // Prompt rows of a step that also decodes: at most max(this, its decodes); 0 = no bound
  // beyond max_batch_tokens (SchedulerConfig). 192 keeps the decodes' ITL p99 within twice
  // their p50 while long prompts arrive (docs/configuration.md, --prefill-chunk-tokens).
  int32_t prefill_chunk_tokens = 192;
  // Positions of context that cost a prompt row beside decodes as much as the row itself (a
  // late chunk of a long prompt takes fewer rows); 0 = every row counts 1 (SchedulerConfig).
  int32_t prefill_context_per_row = 4096;
  // Tokens per sequence (prompt + generated); 0 = the model's n_ctx_train. Always clipped to
  // what the KV cache holds, so one sequence alone can always run to completion.
  int32_t max_context = 0;
  // Threads that sample the rows of one step in parallel (the engine thread counts as one);
  // 0 = min(4, cores). Only steps with many rows use them.
  int32_t sampler_threads = 0;
  // Draw tokens on the device when the executor can (Executor::samples_on_device) and the
  // request allows (Sampler::device_sampling): then only token ids leave the GPU per step.
  bool device_sampling = true;
  // Embedding inputs (sequences) per forward pass: a CUDA executor refuses passes of more
  // sequences than it was sized for (its max_seqs).
  int32_t max_embedding_seqs = 256;
  // Reuse the KV blocks of earlier requests' identical prompt prefixes (BlockManager).
  bool prefix_caching = true;
};

class Engine {
 public:
  // Validates `config`, starts the engine thread. The engine owns the executor.
  static Result<std::unique_ptr<Engine>> create(std::unique_ptr<Executor> executor,
                                                std::shared_ptr<const Tokenizer> tokenizer,
                                                const EngineConfig& config);
  // Stops the thread; every open request gets kFinish(kCancelled) with a kUnavailable error.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Thread-safe. Errors: kInvalidArgument (empty prompt, token outside the vocabulary,
  // max_new_tokens < 1, bad sampling parameters), kOutOfRange (prompt + max_new_tokens longer
  // than max_context()), kUnavailable (draining or shut down), kResourceExhausted (max_waiting
  // requests are already queued).
  Result<RequestHandle> submit(GenerationRequest request);
  // Thread-safe. Queued and admitted like a generation (one request, whatever its number of
  // inputs); its stream is one kFinish event with the vectors (GenerationEvent::embeddings).
  // Errors as submit(), and: kInvalidArgument (no inputs, an empty one, a token outside the
  // vocabulary), kOutOfRange (an input longer than max_context()), kUnsupported (the executor
  // has no forward_hidden: a multi-GPU layout).
  Result<RequestHandle> submit_embedding(EmbeddingRequest request);
  // Whether submit_embedding() can succeed on this engine's executor.
  bool embeddings_supported() const { return returns_hidden_; }

  EngineStats stats() const;
  // Requests submitted and not yet finished (queued + running), counted from submit() on, so
  // that a router sees a request the moment it is accepted (stats() lags by one step).
  int32_t open_requests() const;

  // Stops accepting requests and waits until every open request has finished. Requests
  // still open after `timeout` are cancelled (their streams end with kCancelled) and the
  // result is kDeadlineExceeded. Submissions stay refused afterwards.
  Status drain(std::chrono::milliseconds timeout);
  // Idempotent; also called by the destructor.
  void shutdown();

  int32_t max_context() const { return max_context_; }
  const ModelConfig& model_config() const { return executor_->config(); }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  std::string describe() const;

 private:
  using Clock = std::chrono::steady_clock;
  static double ms_between(Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration<double, std::milli>(to - from).count();
  }

  struct IncomingRequest {
    GenerationRequest request;
    std::shared_ptr<RequestChannel> channel;
    Clock::time_point submitted;
    uint64_t seed = 0;
  };
  struct IncomingEmbedding {
    EmbeddingRequest request;
    std::shared_ptr<RequestChannel> channel;
    Clock::time_point submitted;
  };

  // Where callers and the engine thread meet. Shared with the request channels (weakly) so
  // that a cancel arriving after the engine is gone is harmless.
  struct Inbox {
    std::mutex mutex;
    std::condition_variable wake;  // the engine thread sleeps here when it has no work
    std::condition_variable idle;  // drain() waits here for n_open to reach 0
    std::deque<IncomingRequest> incoming;
    std::deque<IncomingEmbedding> incoming_embeddings;
    bool cancel_pending = false;  // some channel asked to cancel
    bool cancel_all = false;      // drain timed out: cancel everything open (one-shot)
    bool draining = false;        // refuse new submissions
    bool stop = false;            // the engine thread must exit
    int32_t n_queued = 0;         // submitted, not yet scheduled for the first time
    int32_t n_open = 0;           // submitted, finish event not yet pushed
  };

  Engine(std::unique_ptr<Executor> executor, std::shared_ptr<const Tokenizer> tokenizer,
         const EngineConfig& config, int32_t max_context);

  Status validate(const GenerationRequest& request) const;
  Status validate(const EmbeddingRequest& request) const;
  // A channel whose cancel wakes the engine thread (also harmless once the engine is gone).
  std::shared_ptr<RequestChannel> new_channel(std::string id) const;
  // `id`, or when empty a fresh one: `prefix`-N.
  std::string request_id(std::string id, std::string_view prefix);
  // Under inbox_->mutex: refuses while draining or when max_waiting requests are queued, else
  // counts one more queued and open request.
  Status admit_locked();
  // Admits `incoming` (admit_locked) into the inbox's `queue` and wakes the engine thread.
  template <typename Incoming>
  Result<RequestHandle> enqueue(std::deque<Incoming> Inbox::*queue, Incoming incoming) {
    std::shared_ptr<RequestChannel> channel = incoming.channel;
    {
      std::lock_guard lock(inbox_->mutex);
      LS_RETURN_IF_ERROR(admit_locked());
      ((*inbox_).*queue).push_back(std::move(incoming));
    }
    inbox_->wake.notify_all();
    return RequestHandle(std::move(channel));
  }

  // Engine thread.
  void run_loop();
  void start_request(IncomingRequest incoming);
  void sweep_cancellations_and_timeouts(bool cancel_all);
  void run_step();
  // Samples every row of the step (in parallel when there are many), then handles the
  // tokens in chunk order.
  void sample_and_emit(const StepPlan& plan);
  // Runs the executor over batch_: logits to the host, or tokens drawn on the device.
  Status forward_step(const StepPlan& plan);
  void on_token(ActiveRequest& active, const SampledToken& sampled);
  // Ends a request: flushes held text (when `flush_text`), pushes the finish event, frees
  // its sequence and blocks.
  void finish(SeqId id, FinishReason reason, Status error, bool flush_text);
  void emit_pending(ActiveRequest& active);
  // A token's text for logprobs: its bytes, with incomplete characters as U+FFFD.
  std::string token_text(int32_t token) const;
  void publish_stats();
  void finish_everything_on_shutdown();
  // Embeddings (engine_embeddings.cc).
  void start_embedding(IncomingEmbedding incoming);
  // One pass of the EmbeddingBatcher, when something fits.
  void run_embedding_pass();
  void sweep_embeddings(bool cancel_all, std::chrono::steady_clock::time_point now);
  // Pushes the job's finish event (with its vectors when `reason` is kStop).
  void finish_embedding(std::unique_ptr<EmbeddingJob> job, FinishReason reason, Status error);

  const std::unique_ptr<Executor> executor_;
  const std::shared_ptr<const Tokenizer> tokenizer_;
  const EngineConfig config_;
  const int32_t max_context_;
  const int32_t n_vocab_;
  const bool returns_hidden_;

  std::shared_ptr<Inbox> inbox_;
  std::atomic<uint64_t> next_request_number_{1};

  // Engine thread only.
  BlockManager blocks_;
  Scheduler scheduler_;
  std::unordered_map<SeqId, std::unique_ptr<ActiveRequest>> active_;
  SeqId next_seq_id_ = 1;
  Batch batch_;
  std::vector<float> logits_;
  // Per logit row of the step: the device's sampling parameters and drawn token, and whether
  // the host samples the row instead (from logits_).
  std::vector<RowSampling> row_sampling_;
  std::vector<int32_t> device_tokens_;
  std::vector<uint8_t> host_sampled_;
  ThreadPool sampler_pool_;
  std::vector<SamplerScratch> sampler_scratch_;  // one per part of the sampler pool
  std::vector<std::pair<ActiveRequest*, SampledToken>> sampled_;
  EngineStats counters_;  // the cumulative fields of stats()
  EmbeddingBatcher embeddings_;
  std::vector<float> hidden_;  // the embedding pass's final-normed rows
  std::vector<EmbeddingJob*> embeddings_started_;
  std::vector<std::unique_ptr<EmbeddingJob>> embeddings_finished_;

  mutable std::mutex stats_mutex_;
  EngineStats stats_;  // guarded by stats_mutex_: published after every loop iteration

  std::thread thread_;
  std::once_flag shutdown_once_;
};

}  // namespace llamaserve
