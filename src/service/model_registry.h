// ModelRegistry: the models a server holds and their lifecycle. Each configured model is
// unloaded, loading, loaded or failed; requests take a lease on its current version, which
// loads it on demand (waiting up to a bound) and keeps that version alive until the lease ends.
//
// - Capacity: at most max_loaded models at once; when a load needs room (the cap, or a device
//   that reports it is out of memory) the least recently used model with no lease is unloaded
//   first. Models unused for their keep_alive are unloaded by a janitor.
// - Reload: the new version is opened (and warmed up) beside the old one; new leases get it
//   from then on, the old version serves the leases it has and is closed when the last ends,
//   or after the drain timeout (its requests are then cancelled). When the two do not fit
//   together, new leases wait while the old version drains, then the new one loads. A reload
//   that fails leaves the old version serving and the error in the entry.
// - Unload: the version leaves the registry at once (new requests load it again) and retires
//   like an old version after a reload.
//
// Loads run one at a time on the registry's loader thread; every member is thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "service/config.h"
#include "service/model_service.h"

namespace llamaserve {

enum class ModelState { kUnloaded, kLoading, kLoaded, kFailed };
const char* model_state_name(ModelState state);

struct RegistryOptions {
  int max_loaded = 0;  // 0 = no cap
  // How long a retired version (reloaded or unloaded) may keep serving its requests.
  std::chrono::milliseconds drain_timeout{30000};
  std::chrono::milliseconds janitor_interval{1000};
  // How models are opened; tests and the server pass their own (progress off, hooks).
  std::function<Result<std::unique_ptr<ModelService>>(const ModelSpec&)> open;
};

// What /v1/models and the metrics report of one model.
struct ModelStatus {
  std::string name;
  std::vector<std::string> aliases;
  std::string path;
  ModelState state = ModelState::kUnloaded;
  std::string error;           // kFailed, or a failed reload while the old version serves
  int64_t context_tokens = 0;  // of the loaded version; else the configured value (0: default)
  int64_t created = 0;         // unix seconds the loaded version was opened
  int in_flight = 0;           // leases on any version
  uint64_t loads = 0;          // successful loads
  uint64_t load_failures = 0;
  double last_load_seconds = 0;
  bool required = false;
};

class ModelRegistry;

// A request's hold on one version of a model: the service stays open until the lease ends.
class ModelLease {
 public:
  ModelLease() = default;
  ~ModelLease();
  ModelLease(ModelLease&& other) noexcept;
  ModelLease& operator=(ModelLease&& other) noexcept;
  ModelLease(const ModelLease&) = delete;
  ModelLease& operator=(const ModelLease&) = delete;

  ModelService& service() const { return *version_->service; }
  explicit operator bool() const { return version_ != nullptr; }

  struct Version {
    std::shared_ptr<ModelService> service;
    int leases = 0;  // guarded by the registry's mutex
  };

 private:
  friend class ModelRegistry;
  ModelLease(ModelRegistry* registry, std::shared_ptr<Version> version);
  void release();

  ModelRegistry* registry_ = nullptr;
  std::shared_ptr<Version> version_;
};

class ModelRegistry {
 public:
  // Every spec must have a distinct served_name().
  static Result<std::unique_ptr<ModelRegistry>> create(std::vector<ModelSpec> specs,
                                                       RegistryOptions options);
  ~ModelRegistry();  // stops the threads and closes every version

  // Queues the loads of the models marked load_at_start.
  void start();
  // Waits for the loads start() queued. Not ok when a required model failed, or when models
  // were to load at start and none did.
  Status wait_started();
  // Drains every loaded version's engines (Engine::drain) within `timeout` in all.
  Status drain(std::chrono::milliseconds timeout);
  // True once every required model is loaded (and at least one model is).
  bool ready() const;
  // Closes every version, waiting for retiring ones at most the drain timeout.
  void shutdown();

  // The current version of `name`, loading it if needed and waiting up to `wait` for that.
  // kNotFound names the served models; kUnavailable while loading past `wait` or when the
  // model failed to load (with the error); kResourceExhausted when it cannot fit.
  Result<ModelLease> acquire(const std::string& name, std::chrono::milliseconds wait);
  // The first configured model's name: requests that name none get it.
  const std::string& default_model() const { return default_model_; }
  std::vector<std::string> names() const;

  // Admin operations; they wait for the load they start. reload() with a path serves that file
  // from then on.
  Status load(const std::string& name);
  Status unload(const std::string& name);
  Status reload(const std::string& name, std::optional<std::string> path = std::nullopt);
  // Sets how long `name` may stay loaded without requests (a request's keep_alive).
  void set_keep_alive(const std::string& name, std::chrono::milliseconds keep_alive);
  // Applies a new list of models: added ones are registered (and loaded if load_at_start),
  // removed ones unloaded and dropped, ones whose spec changed reloaded.
  Status reconfigure(std::vector<ModelSpec> specs);

  std::vector<ModelStatus> status() const;
  // The cumulative engine counters (tokens, steps, finished requests) of every version closed
  // so far, so that totals over the loaded versions plus these never go down.
  EngineStats retired_engine_totals() const;
  // Calls `visit` with every loaded current version (for metrics), under the registry's lock:
  // `visit` must be quick and must not call back into the registry.
  void for_each_loaded(const std::function<void(const std::string&, ModelService&)>& visit) const;

 private:
  friend class ModelLease;
  struct Entry;
  explicit ModelRegistry(RegistryOptions options);
  Entry* find(const std::string& name);  // mutex held
  void loader_loop();
  void janitor_loop();
  // Opens `spec` for `entry` on the loader thread, making room as needed (mutex not held).
  Result<std::shared_ptr<ModelLease::Version>> open_with_room(Entry& entry, const ModelSpec& spec);
  // The least recently used loaded entry without leases, other than `keep`; null if none.
  Entry* eviction_candidate(const Entry* keep);  // mutex held
  // Takes the entry's version out and drains and closes it in the background (mutex held).
  void retire(Entry& entry);
  // Closes a version no lease holds, adding its engine counters to retired_ (mutex not held).
  void close_version(ModelLease::Version& version);
  void release(ModelLease::Version& version);
  // Queues a load (spec none) or a reload of `entry` (mutex held).
  void queue_job(Entry& entry, std::optional<ModelSpec> spec);
  Status wait_for_load(std::unique_lock<std::mutex>& lock, Entry& entry, uint64_t job);

  RegistryOptions options_;
  std::string default_model_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::unique_ptr<Entry>> entries_;
  struct Job {
    Entry* entry;
    std::optional<ModelSpec> spec;  // a reload's new spec; none: load the entry's spec
    uint64_t id;
  };
  std::deque<Job> jobs_;
  uint64_t next_job_ = 1;
  uint64_t use_clock_ = 0;  // orders uses for LRU
  EngineStats retired_;     // counters of closed versions
  bool stopping_ = false;
  std::vector<std::thread> retiring_;
  std::thread loader_;
  std::thread janitor_;
};

}  // namespace llamaserve
