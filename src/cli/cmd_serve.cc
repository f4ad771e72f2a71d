// llamaserve serve: the HTTP server.
//
//   llamaserve serve -m MODEL [--host 127.0.0.1] [--port 8080] [options]
//
// Order of events: bind and start answering (/health 200, /ready 503), load the model,
// build one executor and engine per replica (--replicas, each on its own devices), run a
// short warm-up generation on each, then /ready turns 200.
// With --tp N --tp-rank 0 the server is rank 0 of a tensor-parallel group of N processes, one
// GPU each, and waits for ranks 1..N-1 (`llamaserve tp-worker`) before /ready (docs/multi-gpu.md).
// On SIGTERM or SIGINT: /ready and new requests get 503, admitted requests finish (up to
// --drain-timeout-ms, after which they are cancelled), the listener closes, the engine and
// the model are freed, and the process exits 0. Every option is also read from
// LLAMASERVE_<NAME> and from the --config JSON file (docs/configuration.md).
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <spdlog/spdlog.h>

#include "cli/command.h"
#include "engine/engine.h"
#include "engine/engine_group.h"
#include "gguf/gguf.h"
#include "model/weights.h"
#include "server/http_server.h"
#include "server/options.h"
#include "service/layout_factory.h"
#include "service/load_progress.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace llamaserve::cli {
namespace {

using server::ServerOptions;

// SIGINT and SIGTERM are blocked in every thread (the mask is inherited by threads created
// later, so this must exist before any other thread) and taken by one thread with sigwait,
// so that the shutdown logic runs as ordinary code, not in a signal handler.
class ShutdownSignal {
 public:
  ShutdownSignal() {
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGINT);
    sigaddset(&signals_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
    signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not kill the process
    waiter_ = std::thread([this] {
      int signal_number = 0;
      sigwait(&signals_, &signal_number);
      {
        std::lock_guard lock(mutex_);
        received_ = signal_number;
      }
      changed_.notify_all();
    });
  }

  ~ShutdownSignal() {
    if (received() == 0) pthread_kill(waiter_.native_handle(), SIGTERM);  // wake sigwait
    waiter_.join();
  }

  int received() {
    std::lock_guard lock(mutex_);
    return received_;
  }

  int wait() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return received_ != 0; });
    return received_;
  }

 private:
  sigset_t signals_;
  std::thread waiter_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int received_ = 0;
};

Result<std::shared_ptr<server::ServedModel>> load_served_model(const ServerOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  LS_ASSIGN_OR_RETURN(std::shared_ptr<const LoadedModel> model,
                      load_model_for_device(options.model_path, options.device));
  LS_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::from_gguf(*model->file));
  auto shared_tokenizer = std::make_shared<const Tokenizer>(std::move(tokenizer));

  auto served = std::make_shared<server::ServedModel>();
  served->tokenizer = shared_tokenizer;
  served->name = options.model_name;
  served->created = std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
  auto chat_template =
      ChatTemplate::for_model(shared_tokenizer->data().chat_template, options.chat_template);
  if (chat_template) {
    served->chat_template = std::move(chat_template).value();
  } else if (!options.chat_template.empty()) {
    return chat_template.status().with_context("--chat-template");
  } else {
    spdlog::warn("serve: no usable chat template ({}); chat endpoints will answer 400",
                 chat_template.status().to_string());
  }

  const int64_t n_ctx_train = model->config.n_ctx_train;
  const int64_t context = options.ctx_size > 0
                              ? options.ctx_size
                              : std::min<int64_t>(n_ctx_train > 0 ? n_ctx_train : 4096, 8192);
  ExecutorOptions executor_options = server::base_executor_options(options);
  // Per replica: each has its own KV cache and runs up to max-running sequences.
  executor_options.kv_capacity_tokens =
      options.kv_cache_tokens > 0 ? options.kv_cache_tokens : context * options.max_running;
  executor_options.max_context_tokens = context;
  // A decode step of max-running sequences, and the padding sequence the CUDA executor adds to
  // decode steps it replays as graphs.
  executor_options.max_seqs = std::max(256, options.max_running + 1);
  // --tp-rank 0: one replica, rank 0 of a group of processes.
  std::vector<ExecutorOptions> replica_executor_options = {executor_options};
  if (options.tp_rank < 0) {
    LS_ASSIGN_OR_RETURN(replica_executor_options,
                        replica_options(executor_options, options.replicas));
  }

  EngineConfig engine_config;
  engine_config.max_running = options.max_running;
  // The server admits at most replicas x max-running + max-queue requests itself; each
  // engine's queue bound is a backstop that those can never reach.
  engine_config.max_waiting = options.admission_limit();
  if (options.max_batch_tokens > 0) engine_config.max_batch_tokens = options.max_batch_tokens;
  engine_config.max_context = static_cast<int32_t>(context);
  engine_config.device_sampling = !options.host_sampling;
  std::vector<std::unique_ptr<Engine>> replicas;
  for (size_t i = 0; i < replica_executor_options.size(); ++i) {
    ExecutorOptions replica = replica_executor_options[i];
    LoadProgress upload(options.model_path);  // weights going to a GPU
    replica.on_upload_progress = upload.callback();
    auto executor = options.tp_rank >= 0 ? create_tp_rank0_executor(
                                               model, replica, server::tp_process_options(options))
                                         : create_executor(model, replica);
    upload.finish();
    if (!executor.is_ok() && options.replicas > 1) {
      return executor.status().with_context(fmt::format("replica {} ({})", i, replica.device));
    }
    LS_RETURN_IF_ERROR(executor.status());
    LS_ASSIGN_OR_RETURN(
        std::unique_ptr<Engine> engine,
        Engine::create(std::move(executor).value(), shared_tokenizer, engine_config));
    replicas.push_back(std::move(engine));
  }
  LS_ASSIGN_OR_RETURN(std::unique_ptr<EngineGroup> group, EngineGroup::create(std::move(replicas)));
  served->engine = std::move(group);
  spdlog::info("serve: loaded {} in {:.1f} s: {}", options.model_path,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
               served->engine->describe());
  return served;
}

// One short greedy generation on every replica, so that the first real request does not
// pay for first-touch page faults of the weights and KV cache.
Status warm_up(const server::ServedModel& served, int n_tokens) {
  std::vector<RequestHandle> handles;
  for (size_t replica = 0; replica < served.engine->size(); ++replica) {
    GenerationRequest request;
    request.id = served.engine->size() == 1 ? "warmup" : fmt::format("warmup-{}", replica);
    request.prompt_tokens = served.tokenizer->encode("Hello", /*add_special=*/true,
                                                     /*parse_special=*/false);
    request.max_new_tokens = n_tokens;
    request.sampling.temperature = 0.0f;
    request.ignore_eos = true;
    LS_ASSIGN_OR_RETURN(RequestHandle handle,
                        served.engine->submit_to(replica, std::move(request)));
    handles.push_back(std::move(handle));
  }
  for (RequestHandle& handle : handles) {
    std::optional<GenerationEvent> finish;
    while (auto event = handle.next(std::chrono::minutes(10))) {
      if (event->kind == GenerationEvent::Kind::kFinish) finish = std::move(event);
    }
    if (!finish) {
      return make_error(StatusCode::kDeadlineExceeded,
                        "warm-up {} produced no result in 10 minutes", handle.id());
    }
    if (finish->finish_reason != FinishReason::kLength &&
        finish->finish_reason != FinishReason::kStop) {
      return finish->error.is_ok()
                 ? make_error(StatusCode::kInternal, "{} ended with '{}'", handle.id(),
                              finish_reason_name(finish->finish_reason))
                 : finish->error.with_context(handle.id());
    }
  }
  return Status::ok();
}

int run_serve(CLI::App& app, ServerOptions& options) {
  if (Status status = server::finalize_server_options(app, options); !status.is_ok()) {
    spdlog::error("serve: {}", status.to_string());
    return 2;
  }
  ShutdownSignal shutdown;
  server::HttpServer http(options);
  if (Status status = http.bind(); !status.is_ok()) {
    spdlog::error("serve: {}", status.to_string());
    return 1;
  }
  spdlog::info("serve: listening on http://{}:{} ({} HTTP threads, {} running + {} queued)",
               options.host, http.port(), options.http_threads,
               options.replicas * options.max_running, options.max_queue);
  std::thread http_thread([&http] { http.serve(); });
  auto stop_http = [&] {
    http.stop();
    http_thread.join();
    http.release_model();
  };

  auto served = load_served_model(options);
  Status warm = served ? warm_up(**served, options.warmup_tokens) : served.status();
  if (!warm.is_ok()) {
    spdlog::error("serve: {}", warm.to_string());
    stop_http();
    return 1;
  }
  std::shared_ptr<EngineGroup> engine = (*served)->engine;
  if (shutdown.received() == 0) {
    http.set_model(*served);
    spdlog::info("serve: ready (model '{}', context {} tokens)", options.model_name,
                 engine->max_context());
  }
  served = Status(StatusCode::kCancelled, "handed to the server");

  const int signal_number = shutdown.wait();
  const auto drain_timeout = std::chrono::milliseconds(options.drain_timeout_ms);
  const auto deadline = std::chrono::steady_clock::now() + drain_timeout;
  spdlog::info("serve: {} received; draining (up to {} ms)",
               signal_number == SIGINT ? "SIGINT" : "SIGTERM", options.drain_timeout_ms);
  http.begin_drain();
  if (Status drained = engine->drain(drain_timeout); !drained.is_ok()) {
    spdlog::warn("serve: {}", drained.to_string());
  }
  // The engine is done; give the HTTP threads the rest of the budget (and a moment more) to
  // write the final events of the streams that just finished.
  const auto remaining = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  if (!http.wait_until_idle(std::max(remaining, std::chrono::milliseconds(0)) +
                            std::chrono::seconds(2))) {
    spdlog::warn("serve: some responses were still being written at shutdown");
  }
  stop_http();
  engine->shutdown();
  engine.reset();  // frees the executors, KV caches and weights
  spdlog::info("serve: shut down");
  return 0;
}

std::function<int()> setup_serve(CLI::App& sub) {
  auto options = std::make_shared<ServerOptions>();
  server::add_server_options(sub, *options);
  return [&sub, options] { return run_serve(sub, *options); };
}

}  // namespace

LLAMASERVE_COMMAND(serve, "serve", "Serve a model over an OpenAI-compatible HTTP API", setup_serve);

}  // namespace llamaserve::cli
