// EngineGroup: whole-model replicas behind a router. Each replica is an Engine with its own
// executor (its own devices, or its share of the CPU threads) and its own KV cache; the
// replicas share the loaded model and the tokenizer. A request runs from submit() to its
// finish event on the one replica it was sent to.
//
// Routing: submit() sends a request to the replica with the fewest open requests (queued +
// running, Engine::open_requests), ties to the lowest index. A replica whose queue is full
// (kResourceExhausted) passes the request to the next least-loaded one.
//
// Threads: like Engine, every public member may be called from any thread. With one replica
// every call is the replica's own, so a group of one behaves exactly like its Engine.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"
#include "engine/request.h"

namespace llamaserve {

class EngineGroup {
 public:
  // Errors (kInvalidArgument): no replicas, a null one, replicas that do not share one
  // tokenizer object (prompts are tokenized once, for whichever replica runs them) or whose
  // models' vocabulary sizes differ.
  static Result<std::unique_ptr<EngineGroup>> create(std::vector<std::unique_ptr<Engine>> replicas);
  // Shuts every replica down.
  ~EngineGroup();
  EngineGroup(const EngineGroup&) = delete;
  EngineGroup& operator=(const EngineGroup&) = delete;

  // Errors as Engine::submit; kResourceExhausted only when every replica's queue is full.
  Result<RequestHandle> submit(GenerationRequest request);
  // Bypasses the router: for work every replica must do, such as a warm-up.
  // PRECONDITION: replica < size().
  Result<RequestHandle> submit_to(size_t replica, GenerationRequest request);
  // Routed like submit(); errors as Engine::submit_embedding.
  Result<RequestHandle> submit_embedding(EmbeddingRequest request);
  // Whether every replica can compute embeddings (Engine::embeddings_supported).
  bool embeddings_supported() const;

  // Every field summed over the replicas.
  EngineStats stats() const;
  // PRECONDITION: replica < size().
  EngineStats replica_stats(size_t replica) const;
  int32_t replica_open_requests(size_t replica) const;

  // Drains every replica at the same time (Engine::drain), each with the whole `timeout`.
  // Not ok when any replica had to cancel requests; the message names those replicas.
  Status drain(std::chrono::milliseconds timeout);
  // Idempotent; also called by the destructor.
  void shutdown();

  // The shortest context of any replica (they differ only if their KV caches do).
  int32_t max_context() const { return max_context_; }
  const ModelConfig& model_config() const { return replicas_.front()->model_config(); }
  const Tokenizer& tokenizer() const { return replicas_.front()->tokenizer(); }
  // One replica: its Engine::describe(). Several: "2 replicas: [0] ...; [1] ...".
  std::string describe() const;
  size_t size() const { return replicas_.size(); }

 private:
  explicit EngineGroup(std::vector<std::unique_ptr<Engine>> replicas);

  // The router of submit() and submit_embedding(): submit(replica, request) is called for the
  // least-loaded replica first, and the next ones while the queues are full.
  template <typename Request, typename Submit>
  Result<RequestHandle> route(Request request, Submit submit);

  const std::vector<std::unique_ptr<Engine>> replicas_;
  const int32_t max_context_;
  // Held from choosing a replica until the request is in its queue, so that concurrent
  // submissions see each other's load.
  std::mutex route_mutex_;
  uint64_t next_request_number_ = 1;  // guarded by route_mutex_
};

}  // namespace llamaserve
