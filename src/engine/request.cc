#include "engine/request.h"

#include "engine/channel.h"

namespace llamaserve {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
    case FinishReason::kTimeout: return "timeout";
  }
  return "unknown";
}

const char* embedding_pooling_name(EmbeddingPooling pooling) {
  return pooling == EmbeddingPooling::kLast ? "last" : "mean";
}

std::optional<EmbeddingPooling> parse_embedding_pooling(std::string_view name) {
  if (name == "mean") return EmbeddingPooling::kMean;
  if (name == "last") return EmbeddingPooling::kLast;
  return std::nullopt;
}

RequestChannel::RequestChannel(std::string id, std::function<void()> on_cancel)
    : id_(std::move(id)), on_cancel_(std::move(on_cancel)) {}

void RequestChannel::push(GenerationEvent event) {
  {
    std::lock_guard lock(mutex_);
    if (closed_) return;
    if (event.kind == GenerationEvent::Kind::kFinish) closed_ = true;
    events_.push_back(std::move(event));
  }
  ready_.notify_all();
}

bool RequestChannel::closed() const {
  std::lock_guard lock(mutex_);
  return closed_;
}

std::optional<GenerationEvent> RequestChannel::next(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (finish_delivered_) return std::nullopt;
  if (!ready_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
  GenerationEvent event = std::move(events_.front());
  events_.pop_front();
  if (event.kind == GenerationEvent::Kind::kFinish) finish_delivered_ = true;
  return event;
}

void RequestChannel::request_cancel() {
  if (closed()) return;
  if (cancel_requested_.exchange(true, std::memory_order_acq_rel)) return;
  if (on_cancel_) on_cancel_();
}

bool RequestChannel::delivered_finish() const {
  std::lock_guard lock(mutex_);
  return finish_delivered_;
}

RequestHandle::RequestHandle(std::shared_ptr<RequestChannel> channel)
    : channel_(std::move(channel)) {}

RequestHandle::~RequestHandle() {
  if (channel_) channel_->request_cancel();
}

RequestHandle::RequestHandle(RequestHandle&&) noexcept = default;

RequestHandle& RequestHandle::operator=(RequestHandle&& other) noexcept {
  if (this != &other) {
    if (channel_) channel_->request_cancel();
    channel_ = std::move(other.channel_);
  }
  return *this;
}

const std::string& RequestHandle::id() const {
  static const std::string kEmpty;
  return channel_ ? channel_->id() : kEmpty;
}

std::optional<GenerationEvent> RequestHandle::next(std::chrono::milliseconds timeout) {
  if (!channel_) return std::nullopt;
  return channel_->next(timeout);
}

void RequestHandle::cancel() {
  if (channel_) channel_->request_cancel();
}

bool RequestHandle::finished() const { return !channel_ || channel_->delivered_finish(); }

void StepDurations::observe(double seconds) {
  size_t bucket = 0;
  while (bucket < kStepSecondsBounds.size() && seconds > kStepSecondsBounds[bucket]) ++bucket;
  ++buckets[bucket];
  ++count;
  seconds_total += seconds;
}

void add_engine_stats(EngineStats& total, const EngineStats& part) {
  total.waiting += part.waiting;
  total.running += part.running;
  total.kv_blocks_total += part.kv_blocks_total;
  total.kv_blocks_free += part.kv_blocks_free;
  total.requests_finished += part.requests_finished;
  total.prompt_tokens_total += part.prompt_tokens_total;
  total.generated_tokens_total += part.generated_tokens_total;
  total.preemptions_total += part.preemptions_total;
  total.steps_total += part.steps_total;
  total.device_sampled_steps_total += part.device_sampled_steps_total;
  total.step_seconds_total += part.step_seconds_total;
  total.forward_seconds_total += part.forward_seconds_total;
  for (int kind = 0; kind < kStepKinds; ++kind) {
    StepDurations& sum = total.step_durations[kind];
    const StepDurations& add = part.step_durations[kind];
    for (size_t i = 0; i < sum.buckets.size(); ++i) sum.buckets[i] += add.buckets[i];
    sum.count += add.count;
    sum.seconds_total += add.seconds_total;
  }
  total.kv_blocks_cached += part.kv_blocks_cached;
  total.prefix_cache_queries_total += part.prefix_cache_queries_total;
  total.prefix_cache_query_tokens_total += part.prefix_cache_query_tokens_total;
  total.prefix_cache_hit_tokens_total += part.prefix_cache_hit_tokens_total;
  total.prefix_cache_evictions_total += part.prefix_cache_evictions_total;
}

}  // namespace llamaserve
