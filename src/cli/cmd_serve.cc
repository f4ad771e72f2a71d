// llamaserve serve: the HTTP server.
//
//   llamaserve serve -m MODEL [--host 127.0.0.1] [--port 8080] [options]
//
// Order of events: bind and start answering (/health 200, /ready 503), open the model
// (ModelService: one executor and engine per replica, --replicas each on its own devices, and
// a short warm-up generation on each), then /ready turns 200.
// With --tp N --tp-rank 0 the server is rank 0 of a tensor-parallel group of N processes, one
// GPU each, and waits for ranks 1..N-1 (`llamaserve tp-worker`) before /ready (docs/multi-gpu.md).
// On SIGTERM or SIGINT: /ready and new requests get 503, admitted requests finish (up to
// --drain-timeout-ms, after which they are cancelled), the listener closes, the engine and
// the model are freed, and the process exits 0. A signal while the model is still loading
// exits 0 at once (nothing was admitted); a second signal during the drain exits 1 at once.
// Every option is also read from
// LLAMASERVE_<NAME> and from the --config JSON file (docs/configuration.md).
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include <spdlog/spdlog.h>

#include "cli/command.h"
#include "server/http_server.h"
#include "server/model_list.h"
#include "server/options.h"
#include "service/config.h"
#include "service/model_registry.h"
#include "service/model_service.h"

namespace llamaserve::cli {
namespace {

const char* signal_name(int signal_number) {
  return signal_number == SIGINT ? "SIGINT" : "SIGTERM";
}

// SIGINT, SIGTERM and SIGHUP are blocked in every thread (the mask is inherited by threads
// created later, so this must exist before any other thread) and taken by one thread with
// sigwait, so that the shutdown logic runs as ordinary code, not in a signal handler.
class ShutdownSignal {
 public:
  ShutdownSignal() {
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGINT);
    sigaddset(&signals_, SIGTERM);
    sigaddset(&signals_, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
    signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not kill the process
    waiter_ = std::thread([this] { wait_for_signals(); });
  }

  // From here on a signal drains instead of exiting at once.
  void loaded() {
    std::lock_guard lock(mutex_);
    loading_ = false;
  }

  ~ShutdownSignal() {
    {
      std::lock_guard lock(mutex_);
      closing_ = true;  // the wake-up below is not a signal from outside
      loading_ = false;
    }
    pthread_kill(waiter_.native_handle(), SIGTERM);  // wake sigwait
    waiter_.join();
  }

  int received() {
    std::lock_guard lock(mutex_);
    return received_;
  }

  // The next event: SIGHUP (once per signal) or the shutdown signal (for good).
  int wait() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return received_ != 0 || hangups_ > 0; });
    if (received_ != 0) return received_;
    --hangups_;
    return SIGHUP;
  }

 private:
  void wait_for_signals() {
    bool stopping = false;
    while (true) {
      int signal_number = 0;
      sigwait(&signals_, &signal_number);
      std::unique_lock lock(mutex_);
      if (closing_) return;
      if (signal_number == SIGHUP) {
        ++hangups_;
        lock.unlock();
        changed_.notify_all();
        continue;
      }
      if (loading_) {
        // Nothing is admitted while the models load (generation routes answer 503), so there
        // is nothing to drain; a load can take minutes, and is not waited for.
        spdlog::info("serve: {} while loading the model; exiting", signal_name(signal_number));
        spdlog::shutdown();
        std::_Exit(0);
      }
      if (stopping) {
        // A second signal while draining is an operator who will not wait for the drain.
        spdlog::warn("serve: second {} while draining; exiting now, cutting what is still running",
                     signal_name(signal_number));
        spdlog::shutdown();
        std::_Exit(1);
      }
      stopping = true;
      received_ = signal_number;
      lock.unlock();
      changed_.notify_all();
    }
  }

  sigset_t signals_;
  std::thread waiter_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int received_ = 0;      // guarded by mutex_: SIGINT or SIGTERM
  int hangups_ = 0;       // guarded by mutex_: SIGHUPs not yet handled
  bool loading_ = true;   // guarded by mutex_
  bool closing_ = false;  // guarded by mutex_: the destructor woke the waiter
};

// Every connection is a descriptor: take the hard limit rather than the usual soft 1024.
void raise_descriptor_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  limit.rlim_cur = limit.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    spdlog::warn("serve: cannot raise the open-file limit: {}", std::strerror(errno));
  }
}

// SIGHUP: the --config file's "models" list again, applied as a difference.
void apply_config_again(const ServiceConfig& config, const ModelSpec& defaults,
                        ModelRegistry& registry) {
  const std::string& path = config.server.config_path;
  if (path.empty()) {
    spdlog::warn("serve: SIGHUP ignored: no --config file to read again");
    return;
  }
  auto specs = server::read_models_config(path, defaults);
  if (!specs) {
    spdlog::error("serve: SIGHUP: {}; the models stay as they are", specs.status().to_string());
    return;
  }
  if (specs->empty()) {
    spdlog::warn("serve: SIGHUP: '{}' has no \"models\" list; the models stay as they are", path);
    return;
  }
  for (ModelSpec& spec : *specs) spec.engine.max_waiting = config.models.front().engine.max_waiting;
  spdlog::info("serve: SIGHUP: applying the models of '{}'", path);
  if (Status applied = registry.reconfigure(std::move(specs).value()); !applied.is_ok()) {
    spdlog::error("serve: SIGHUP: {}", applied.to_string());
  }
}

int run_serve(CLI::App& app, ServiceConfig& config) {
  // The flags' model values, before the list replaces them: SIGHUP builds models from them.
  const ModelSpec flag_defaults = config.models.front();
  if (Status status = server::finalize_service_config(app, config); !status.is_ok()) {
    spdlog::error("serve: {}", status.to_string());
    return 2;
  }
  const ServerConfig& options = config.server;
  ShutdownSignal shutdown;
  raise_descriptor_limit();
  server::HttpServer http(config);
  if (Status status = http.bind(); !status.is_ok()) {
    spdlog::error("serve: {}", status.to_string());
    return 1;
  }
  spdlog::info("serve: listening on http://{}:{} ({} HTTP threads, {} running + {} queued)",
               options.host, http.port(), options.http_threads,
               config.admission_limit() - options.max_queue, options.max_queue);
  http.start();

  RegistryOptions registry_options;
  registry_options.max_loaded = options.max_loaded;
  registry_options.drain_timeout = std::chrono::milliseconds(options.drain_timeout_ms);
  auto created = ModelRegistry::create(config.models, registry_options);
  if (!created.is_ok()) {
    spdlog::error("serve: {}", created.status().to_string());
    http.stop();
    return 1;
  }
  std::shared_ptr<ModelRegistry> models = std::move(created).value();
  auto stop_all = [&] {
    http.stop();
    http.release_models();
    models->shutdown();  // frees the executors, KV caches and weights
  };
  http.set_registry(models);
  models->start();
  if (Status started = models->wait_started(); !started.is_ok()) {
    spdlog::error("serve: {}", started.to_string());
    stop_all();
    return 1;
  }
  shutdown.loaded();
  for (const ModelStatus& status : models->status()) {
    if (status.state == ModelState::kLoaded) {
      spdlog::info("serve: model '{}' ready (context {} tokens)", status.name,
                   status.context_tokens);
    } else {
      spdlog::info("serve: model '{}' {}", status.name, model_state_name(status.state));
    }
  }
  spdlog::info("serve: ready");

  int signal_number = 0;
  while ((signal_number = shutdown.wait()) == SIGHUP) {
    apply_config_again(config, flag_defaults, *models);
  }
  const auto drain_timeout = std::chrono::milliseconds(options.drain_timeout_ms);
  const auto deadline = std::chrono::steady_clock::now() + drain_timeout;
  spdlog::info("serve: {} received; draining (up to {} ms; a second signal exits at once)",
               signal_name(signal_number), options.drain_timeout_ms);
  http.begin_drain();
  if (Status drained = models->drain(drain_timeout); !drained.is_ok()) {
    spdlog::warn("serve: {}", drained.to_string());
  }
  // The engines are done; give the HTTP threads the rest of the budget (and a moment more) to
  // write the final events of the streams that just finished.
  const auto remaining = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  if (!http.wait_until_idle(std::max(remaining, std::chrono::milliseconds(0)) +
                            std::chrono::seconds(2))) {
    spdlog::warn("serve: some responses were still being written at shutdown");
  }
  stop_all();
  spdlog::info("serve: shut down");
  return 0;
}

std::function<int()> setup_serve(CLI::App& sub) {
  auto config = std::make_shared<ServiceConfig>();
  server::add_service_options(sub, *config);
  return [&sub, config] { return run_serve(sub, *config); };
}

}  // namespace

LLAMASERVE_COMMAND(serve, "serve", "Serve a model over an OpenAI-compatible HTTP API", setup_serve);

}  // namespace llamaserve::cli
