#include "engine/engine_group.h"

#include <algorithm>
#include <numeric>
#include <thread>

#include <fmt/format.h>

#include "model/config.h"

namespace llamaserve {
namespace {

int32_t shortest_context(const std::vector<std::unique_ptr<Engine>>& replicas) {
  int32_t shortest = replicas.front()->max_context();
  for (const auto& replica : replicas) shortest = std::min(shortest, replica->max_context());
  return shortest;
}

}  // namespace

Result<std::unique_ptr<EngineGroup>> EngineGroup::create(
    std::vector<std::unique_ptr<Engine>> replicas) {
  if (replicas.empty())
    return make_error(StatusCode::kInvalidArgument, "engine group: no replicas");
  for (size_t i = 0; i < replicas.size(); ++i) {
    if (!replicas[i]) {
      return make_error(StatusCode::kInvalidArgument, "engine group: replica {} is null", i);
    }
  }
  const Engine& first = *replicas.front();
  for (size_t i = 1; i < replicas.size(); ++i) {
    if (&replicas[i]->tokenizer() != &first.tokenizer()) {
      return make_error(StatusCode::kInvalidArgument,
                        "engine group: replica {} has its own tokenizer; replicas must share one",
                        i);
    }
    if (replicas[i]->model_config().n_vocab != first.model_config().n_vocab) {
      return make_error(StatusCode::kInvalidArgument,
                        "engine group: replica {} has a vocabulary of {} tokens, replica 0 of {}",
                        i, replicas[i]->model_config().n_vocab, first.model_config().n_vocab);
    }
  }
  return std::unique_ptr<EngineGroup>(new EngineGroup(std::move(replicas)));
}

EngineGroup::EngineGroup(std::vector<std::unique_ptr<Engine>> replicas)
    : replicas_(std::move(replicas)), max_context_(shortest_context(replicas_)) {}

EngineGroup::~EngineGroup() { shutdown(); }

Result<RequestHandle> EngineGroup::submit(GenerationRequest request) {
  if (replicas_.size() == 1) return replicas_.front()->submit(std::move(request));
  return route(std::move(request),
               [](Engine& replica, GenerationRequest r) { return replica.submit(std::move(r)); });
}

Result<RequestHandle> EngineGroup::submit_embedding(EmbeddingRequest request) {
  if (replicas_.size() == 1) return replicas_.front()->submit_embedding(std::move(request));
  return route(std::move(request), [](Engine& replica, EmbeddingRequest r) {
    return replica.submit_embedding(std::move(r));
  });
}

bool EngineGroup::embeddings_supported() const {
  return std::all_of(replicas_.begin(), replicas_.end(),
                     [](const auto& replica) { return replica->embeddings_supported(); });
}

template <typename Request, typename Submit>
Result<RequestHandle> EngineGroup::route(Request request, Submit submit) {
  std::lock_guard lock(route_mutex_);
  std::vector<std::pair<int32_t, size_t>> by_load;  // (open requests, replica)
  by_load.reserve(replicas_.size());
  for (size_t i = 0; i < replicas_.size(); ++i) {
    by_load.emplace_back(replicas_[i]->open_requests(), i);
  }
  std::sort(by_load.begin(), by_load.end());
  // Ids are the engines' to give, but each engine counts on its own; the group numbers the
  // requests it routes so that ids stay unique across replicas.
  if (request.id.empty()) request.id = fmt::format("req-{}", next_request_number_++);
  Status last_error;
  for (size_t k = 0; k < by_load.size(); ++k) {
    Engine& replica = *replicas_[by_load[k].second];
    // A copy for all but the last candidate: a full queue passes the request on.
    Result<RequestHandle> handle =
        k + 1 == by_load.size() ? submit(replica, std::move(request)) : submit(replica, request);
    if (handle.is_ok() || handle.status().code() != StatusCode::kResourceExhausted) return handle;
    last_error = handle.status();
  }
  return make_error(StatusCode::kResourceExhausted, "every replica's queue is full ({})",
                    last_error.message());
}

Result<RequestHandle> EngineGroup::submit_to(size_t replica, GenerationRequest request) {
  if (request.id.empty() && replicas_.size() > 1) {
    std::lock_guard lock(route_mutex_);
    request.id = fmt::format("req-{}", next_request_number_++);
  }
  return replicas_.at(replica)->submit(std::move(request));
}

EngineStats EngineGroup::stats() const {
  if (replicas_.size() == 1) return replicas_.front()->stats();
  EngineStats total;
  for (const auto& replica : replicas_) add_engine_stats(total, replica->stats());
  return total;
}

EngineStats EngineGroup::replica_stats(size_t replica) const {
  return replicas_.at(replica)->stats();
}

int32_t EngineGroup::replica_open_requests(size_t replica) const {
  return replicas_.at(replica)->open_requests();
}

Status EngineGroup::drain(std::chrono::milliseconds timeout) {
  if (replicas_.size() == 1) return replicas_.front()->drain(timeout);
  std::vector<Status> results(replicas_.size());
  std::vector<std::thread> drainers;
  for (size_t i = 1; i < replicas_.size(); ++i) {
    drainers.emplace_back(
        [this, &results, i, timeout] { results[i] = replicas_[i]->drain(timeout); });
  }
  results[0] = replicas_[0]->drain(timeout);
  for (std::thread& drainer : drainers) drainer.join();
  std::string message;
  StatusCode code = StatusCode::kOk;
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].is_ok()) continue;
    if (code == StatusCode::kOk) code = results[i].code();
    message +=
        fmt::format("{}replica {}: {}", message.empty() ? "" : "; ", i, results[i].message());
  }
  return code == StatusCode::kOk ? Status::ok() : Status(code, std::move(message));
}

void EngineGroup::shutdown() {
  for (const auto& replica : replicas_) replica->shutdown();
}

std::string EngineGroup::describe() const {
  if (replicas_.size() == 1) return replicas_.front()->describe();
  std::string text = fmt::format("{} replicas:", replicas_.size());
  for (size_t i = 0; i < replicas_.size(); ++i) {
    text += fmt::format("{} [{}] {}", i == 0 ? "" : ";", i, replicas_[i]->describe());
  }
  return text;
}

}  // namespace llamaserve
