// RequestChannel: the one-way event stream from the engine thread to whoever holds the
// RequestHandle. The engine pushes and never blocks (the queue is unbounded, but a request
// produces at most max_new_tokens + 1 events); the consumer blocks in next().
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "engine/request.h"

namespace llamaserve {

class RequestChannel {
 public:
  // `on_cancel` is called (from the cancelling thread) after the cancel flag is set, so the
  // engine can wake up; it must be safe to call after the engine is gone.
  RequestChannel(std::string id, std::function<void()> on_cancel);

  const std::string& id() const { return id_; }

  // Engine side. Events pushed after the finish event are a bug and are dropped.
  void push(GenerationEvent event);
  bool cancel_requested() const { return cancel_requested_.load(std::memory_order_acquire); }
  // True once the finish event has been pushed.
  bool closed() const;

  // Consumer side.
  std::optional<GenerationEvent> next(std::chrono::milliseconds timeout);
  void request_cancel();
  // True once the finish event has been handed to the consumer.
  bool delivered_finish() const;

 private:
  const std::string id_;
  const std::function<void()> on_cancel_;
  std::atomic<bool> cancel_requested_{false};

  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<GenerationEvent> events_;  // guarded by mutex_
  bool closed_ = false;                 // guarded by mutex_: finish pushed
  bool finish_delivered_ = false;       // guarded by mutex_: finish returned by next()
};

}  // namespace llamaserve
