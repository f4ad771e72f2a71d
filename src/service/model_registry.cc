#include "service/model_registry.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace llamaserve {
namespace {

using Clock = std::chrono::steady_clock;

// Fields whose change needs a new version of a model (SIGHUP, reconfigure).
std::string spec_key(const ModelSpec& spec) {
  const LayoutSpec& l = spec.layout;
  return fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", spec.path, spec.chat_template,
                     spec.context_tokens, spec.kv_cache_tokens, type_name(spec.kv_cache_type),
                     l.device, l.replicas, l.tensor_parallel, l.pipeline_parallel, l.threads,
                     cpu::cpu_isa_name(l.cpu_isa), spec.engine.max_running,
                     spec.engine.max_batch_tokens, spec.warmup_tokens,
                     embedding_pooling_name(spec.embedding_pooling));
}

}  // namespace

const char* model_state_name(ModelState state) {
  switch (state) {
    case ModelState::kUnloaded: return "unloaded";
    case ModelState::kLoading: return "loading";
    case ModelState::kLoaded: return "loaded";
    case ModelState::kFailed: return "failed";
  }
  return "unknown";
}

struct ModelRegistry::Entry {
  ModelSpec spec;
  std::string name;
  ModelState state = ModelState::kUnloaded;
  std::string error;
  std::shared_ptr<ModelLease::Version> current;
  uint64_t last_use = 0;  // use_clock_ value of the last acquire
  Clock::time_point last_used = Clock::now();
  std::chrono::milliseconds keep_alive{0};
  uint64_t loads = 0;
  uint64_t load_failures = 0;
  double last_load_seconds = 0;
  uint64_t pending_job = 0;  // queued or running, 0 = none
  uint64_t done_job = 0;     // the last job finished
  Status done_status;
  bool removed = false;  // reconfigure dropped it; hidden once its job is done
};

// --- ModelLease -------------------------------------------------------------------------------

ModelLease::ModelLease(ModelRegistry* registry, std::shared_ptr<Version> version)
    : registry_(registry), version_(std::move(version)) {}

ModelLease::~ModelLease() { release(); }

ModelLease::ModelLease(ModelLease&& other) noexcept
    : registry_(other.registry_), version_(std::move(other.version_)) {
  other.registry_ = nullptr;
}

ModelLease& ModelLease::operator=(ModelLease&& other) noexcept {
  if (this != &other) {
    release();
    registry_ = other.registry_;
    version_ = std::move(other.version_);
    other.registry_ = nullptr;
  }
  return *this;
}

void ModelLease::release() {
  if (registry_ != nullptr && version_) registry_->release(*version_);
  registry_ = nullptr;
  version_.reset();
}

// --- ModelRegistry ----------------------------------------------------------------------------

ModelRegistry::ModelRegistry(RegistryOptions options) : options_(std::move(options)) {}

Result<std::unique_ptr<ModelRegistry>> ModelRegistry::create(std::vector<ModelSpec> specs,
                                                             RegistryOptions options) {
  if (specs.empty()) return Status(StatusCode::kInvalidArgument, "no models to serve");
  if (!options.open) {
    options.open = [](const ModelSpec& spec) { return ModelService::open(spec); };
  }
  std::unique_ptr<ModelRegistry> registry(new ModelRegistry(std::move(options)));
  for (ModelSpec& spec : specs) {
    const std::string name = spec.served_name();
    if (const Entry* other = registry->find(name)) {
      if (other->name == name) {
        return make_error(StatusCode::kInvalidArgument, "two models are named '{}'", name);
      }
      return make_error(StatusCode::kInvalidArgument, "model '{}' is also an alias of '{}'", name,
                        other->name);
    }
    for (size_t i = 0; i < spec.aliases.size(); ++i) {
      const std::string& alias = spec.aliases[i];
      const bool repeated =
          alias == name || std::find(spec.aliases.begin(), spec.aliases.begin() + i, alias) !=
                               spec.aliases.begin() + i;
      if (alias.empty() || repeated || registry->find(alias) != nullptr) {
        return make_error(StatusCode::kInvalidArgument,
                          "model alias '{}' of '{}' is empty or names a model already", alias,
                          name);
      }
    }
    auto entry = std::make_unique<Entry>();
    entry->name = name;
    entry->keep_alive = std::chrono::milliseconds(spec.keep_alive_ms);
    entry->spec = std::move(spec);
    registry->entries_.push_back(std::move(entry));
  }
  registry->default_model_ = registry->entries_.front()->name;
  registry->loader_ = std::thread([r = registry.get()] { r->loader_loop(); });
  registry->janitor_ = std::thread([r = registry.get()] { r->janitor_loop(); });
  return registry;
}

ModelRegistry::~ModelRegistry() { shutdown(); }

ModelRegistry::Entry* ModelRegistry::find(const std::string& name) {
  for (auto& entry : entries_) {
    if (entry->removed) continue;
    const std::vector<std::string>& aliases = entry->spec.aliases;
    if (entry->name == name || std::find(aliases.begin(), aliases.end(), name) != aliases.end()) {
      return entry.get();
    }
  }
  return nullptr;
}

std::vector<std::string> ModelRegistry::names() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> names;
  for (const auto& entry : entries_) {
    if (!entry->removed) names.push_back(entry->name);
  }
  return names;
}

void ModelRegistry::start() {
  std::lock_guard lock(mutex_);
  for (auto& entry : entries_) {
    if (entry->spec.load_at_start && entry->pending_job == 0 && !entry->current) {
      queue_job(*entry, std::nullopt);
    }
  }
  changed_.notify_all();
}

Status ModelRegistry::wait_started() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] {
    if (stopping_) return true;
    for (const auto& entry : entries_) {
      if (entry->spec.load_at_start && entry->pending_job != 0) return false;
    }
    return true;
  });
  bool any_at_start = false, any_loaded = false;
  for (const auto& entry : entries_) {
    any_at_start |= entry->spec.load_at_start;
    any_loaded |= entry->current != nullptr;
    if (entry->spec.required && entry->spec.load_at_start && !entry->current) {
      return entry->done_status.is_ok()
                 ? make_error(StatusCode::kUnavailable, "model '{}' did not load", entry->name)
                 : entry->done_status;
    }
  }
  if (any_at_start && !any_loaded) {
    return Status(StatusCode::kUnavailable, "no model could be loaded");
  }
  return Status::ok();
}

Status ModelRegistry::drain(std::chrono::milliseconds timeout) {
  std::vector<std::pair<std::string, std::shared_ptr<ModelLease::Version>>> versions;
  {
    std::lock_guard lock(mutex_);
    for (const auto& entry : entries_) {
      if (entry->current) versions.emplace_back(entry->name, entry->current);
    }
  }
  const auto deadline = Clock::now() + timeout;
  Status result = Status::ok();
  for (auto& [name, version] : versions) {
    const auto left =
        std::max(std::chrono::milliseconds(0),
                 std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
    if (Status drained = version->service->engines().drain(left); !drained.is_ok()) {
      result = drained.with_context(fmt::format("model '{}'", name));
    }
  }
  return result;
}

bool ModelRegistry::ready() const {
  std::lock_guard lock(mutex_);
  bool any = false;
  for (const auto& entry : entries_) {
    if (entry->removed) continue;
    const bool loaded = entry->current != nullptr;
    any |= loaded;
    if (entry->spec.required && !loaded) return false;
  }
  return any;
}

void ModelRegistry::queue_job(Entry& entry, std::optional<ModelSpec> spec) {
  entry.pending_job = next_job_++;
  // A reload beside a serving version leaves it loaded until the swap.
  if (!spec || !entry.current) entry.state = ModelState::kLoading;
  jobs_.push_back({&entry, std::move(spec), entry.pending_job});
  changed_.notify_all();
}

Status ModelRegistry::wait_for_load(std::unique_lock<std::mutex>& lock, Entry& entry,
                                    uint64_t job) {
  changed_.wait(lock, [&] { return stopping_ || entry.done_job >= job; });
  if (stopping_) return Status(StatusCode::kUnavailable, "the server is shutting down");
  return entry.done_status;
}

Result<ModelLease> ModelRegistry::acquire(const std::string& name, std::chrono::milliseconds wait) {
  std::unique_lock lock(mutex_);
  Entry* entry = find(name);
  if (entry == nullptr) {
    std::string served;
    for (const auto& e : entries_) {
      if (!e->removed) served += (served.empty() ? "'" : ", '") + e->name + "'";
    }
    return make_error(StatusCode::kNotFound, "model '{}' is not served here; this server serves {}",
                      name, served);
  }
  entry->last_use = ++use_clock_;
  entry->last_used = Clock::now();
  const auto deadline = Clock::now() + wait;
  while (true) {
    if (stopping_) return Status(StatusCode::kUnavailable, "the server is shutting down");
    // During a reload beside the old version, the old one serves until the swap; a reload
    // without room for both takes the old version out first, and requests wait here.
    if (entry->current) {
      ++entry->current->leases;
      return ModelLease(this, entry->current);
    }
    if (entry->pending_job == 0) {
      // A model that failed for want of memory may fit now; one whose file is broken will not.
      if (entry->state == ModelState::kFailed &&
          entry->done_status.code() != StatusCode::kResourceExhausted) {
        return make_error(StatusCode::kUnavailable, "model '{}' failed to load: {}", name,
                          entry->error);
      }
      queue_job(*entry, std::nullopt);
    }
    const uint64_t job = entry->pending_job;
    if (!changed_.wait_until(lock, deadline, [&] {
          return stopping_ || entry->done_job >= job || entry->current != nullptr;
        })) {
      return make_error(StatusCode::kUnavailable, "model '{}' is loading; retry in a moment", name);
    }
    if (!entry->current && entry->done_job >= job && !entry->done_status.is_ok()) {
      if (entry->done_status.code() == StatusCode::kResourceExhausted) return entry->done_status;
      return make_error(StatusCode::kUnavailable, "model '{}' failed to load: {}", name,
                        entry->done_status.message());
    }
  }
}

void ModelRegistry::release(ModelLease::Version& version) {
  std::lock_guard lock(mutex_);
  --version.leases;
  changed_.notify_all();
}

void ModelRegistry::set_keep_alive(const std::string& name, std::chrono::milliseconds keep_alive) {
  std::lock_guard lock(mutex_);
  if (Entry* entry = find(name)) entry->keep_alive = keep_alive;
}

ModelRegistry::Entry* ModelRegistry::eviction_candidate(const Entry* keep) {
  Entry* oldest = nullptr;
  for (auto& entry : entries_) {
    if (entry.get() == keep || !entry->current || entry->current->leases > 0 ||
        entry->pending_job != 0) {
      continue;
    }
    if (oldest == nullptr || entry->last_use < oldest->last_use) oldest = entry.get();
  }
  return oldest;
}

void ModelRegistry::close_version(ModelLease::Version& version) {
  EngineStats counters = version.service->engines().stats();
  version.service->close();
  // Only the cumulative counters outlive the version; its gauges are gone with it.
  counters.waiting = counters.running = counters.kv_blocks_total = counters.kv_blocks_free = 0;
  std::lock_guard lock(mutex_);
  add_engine_stats(retired_, counters);
}

EngineStats ModelRegistry::retired_engine_totals() const {
  std::lock_guard lock(mutex_);
  return retired_;
}

void ModelRegistry::retire(Entry& entry) {
  std::shared_ptr<ModelLease::Version> version = std::move(entry.current);
  entry.current.reset();
  if (!version) return;
  const std::string name = entry.name;
  const auto timeout = options_.drain_timeout;
  retiring_.emplace_back([this, version, name, timeout] {
    {
      std::unique_lock lock(mutex_);
      if (!changed_.wait_for(lock, timeout, [&] { return version->leases == 0; })) {
        spdlog::warn("models: '{}': {} requests still running after {} ms; cancelling them", name,
                     version->leases, timeout.count());
      }
    }
    // Ends what is left (requests past the drain timeout finish as cancelled).
    if (Status drained = version->service->engines().drain(std::chrono::milliseconds(0));
        !drained.is_ok()) {
      spdlog::warn("models: '{}': {}", name, drained.to_string());
    }
    close_version(*version);
    spdlog::info("models: '{}': previous version closed", name);
  });
}

Result<std::shared_ptr<ModelLease::Version>> ModelRegistry::open_with_room(Entry& entry,
                                                                           const ModelSpec& spec) {
  while (true) {
    {
      std::unique_lock lock(mutex_);
      if (stopping_) return Status(StatusCode::kUnavailable, "the server is shutting down");
      int loaded = 0;
      for (const auto& e : entries_) loaded += e->current != nullptr && e.get() != &entry;
      if (options_.max_loaded > 0 && loaded >= options_.max_loaded) {
        Entry* victim = eviction_candidate(&entry);
        if (victim == nullptr) {
          return make_error(StatusCode::kResourceExhausted,
                            "cannot load '{}': {} models are loaded (--max-loaded) and every one "
                            "is serving requests",
                            entry.name, loaded);
        }
        spdlog::info("models: unloading '{}' (least recently used) to make room for '{}'",
                     victim->name, entry.name);
        auto version = std::move(victim->current);
        victim->state = ModelState::kUnloaded;
        lock.unlock();
        close_version(*version);
        continue;
      }
    }
    const auto started = Clock::now();
    auto opened = options_.open(spec);
    const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
    if (opened.is_ok()) {
      auto version = std::make_shared<ModelLease::Version>();
      version->service = std::shared_ptr<ModelService>(std::move(opened).value());
      std::lock_guard lock(mutex_);
      entry.last_load_seconds = seconds;
      return version;
    }
    if (opened.status().code() != StatusCode::kResourceExhausted) return opened.status();
    // Out of device memory: unload the least recently used idle model and try again.
    std::unique_lock lock(mutex_);
    Entry* victim = eviction_candidate(&entry);
    if (victim == nullptr) return opened.status();
    spdlog::info("models: unloading '{}' (least recently used) to make room for '{}': {}",
                 victim->name, entry.name, opened.status().message());
    auto version = std::move(victim->current);
    victim->state = ModelState::kUnloaded;
    lock.unlock();
    close_version(*version);
  }
}

void ModelRegistry::loader_loop() {
  std::unique_lock lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
    if (stopping_) return;
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    Entry& entry = *job.entry;
    const bool reload = job.spec.has_value();
    const ModelSpec spec = reload ? *job.spec : entry.spec;
    spdlog::info("models: {} '{}' from {}", reload ? "reloading" : "loading", entry.name,
                 spec.path);
    lock.unlock();
    auto opened = open_with_room(entry, spec);
    if (!opened.is_ok() && reload && opened.status().code() == StatusCode::kResourceExhausted) {
      // No room for two versions: new requests wait while the old version drains, then the
      // new one loads in its place (or the old one again, when the new one fails).
      lock.lock();
      entry.state = ModelState::kLoading;
      std::thread drainer;
      if (entry.current) {
        retire(entry);
        drainer = std::move(retiring_.back());
        retiring_.pop_back();
      }
      lock.unlock();
      if (drainer.joinable()) drainer.join();
      spdlog::info("models: '{}': no room for two versions; the old one drained first", entry.name);
      opened = open_with_room(entry, spec);
      if (!opened.is_ok()) {
        spdlog::error("models: '{}': the new version failed ({}); loading the old one again",
                      entry.name, opened.status().message());
        auto restored = open_with_room(entry, entry.spec);
        if (restored.is_ok()) {
          lock.lock();
          entry.current = std::move(restored).value();
          entry.state = ModelState::kLoaded;
          entry.error = opened.status().message();
          entry.pending_job = 0;
          entry.done_job = job.id;
          entry.done_status = opened.status();
          ++entry.load_failures;
          changed_.notify_all();
          continue;
        }
      }
    }
    lock.lock();
    entry.pending_job = 0;
    entry.done_job = job.id;
    if (opened.is_ok()) {
      if (entry.current) retire(entry);
      entry.current = std::move(opened).value();
      entry.state = ModelState::kLoaded;
      entry.error.clear();
      entry.done_status = Status::ok();
      ++entry.loads;
      if (reload) entry.spec = spec;
      spdlog::info("models: '{}' loaded in {:.1f} s", entry.name, entry.last_load_seconds);
    } else {
      ++entry.load_failures;
      entry.error = opened.status().message();
      entry.done_status = opened.status();
      // A failed reload leaves the old version serving.
      entry.state = entry.current ? ModelState::kLoaded : ModelState::kFailed;
      spdlog::error("models: '{}' failed to {}: {}", entry.name, reload ? "reload" : "load",
                    entry.error);
    }
    changed_.notify_all();
  }
}

void ModelRegistry::janitor_loop() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    changed_.wait_for(lock, options_.janitor_interval, [&] { return stopping_; });
    if (stopping_) return;
    const auto now = Clock::now();
    for (auto& entry : entries_) {
      if (!entry->current || entry->current->leases > 0 || entry->pending_job != 0 ||
          entry->keep_alive.count() <= 0 || now - entry->last_used < entry->keep_alive) {
        continue;
      }
      spdlog::info("models: unloading '{}': unused for {} ms (keep_alive)", entry->name,
                   entry->keep_alive.count());
      auto version = std::move(entry->current);
      entry->state = ModelState::kUnloaded;
      lock.unlock();
      close_version(*version);
      lock.lock();
      changed_.notify_all();
      break;  // the list may have changed while unlocked
    }
  }
}

Status ModelRegistry::load(const std::string& name) {
  std::unique_lock lock(mutex_);
  Entry* entry = find(name);
  if (entry == nullptr) return make_error(StatusCode::kNotFound, "no model '{}'", name);
  entry->last_use = ++use_clock_;
  entry->last_used = Clock::now();
  if (entry->current && entry->pending_job == 0) return Status::ok();
  if (entry->pending_job == 0) queue_job(*entry, std::nullopt);
  return wait_for_load(lock, *entry, entry->pending_job);
}

Status ModelRegistry::unload(const std::string& name) {
  std::unique_lock lock(mutex_);
  Entry* entry = find(name);
  if (entry == nullptr) return make_error(StatusCode::kNotFound, "no model '{}'", name);
  // Whatever the load under way ends in, what it leaves is unloaded.
  if (entry->pending_job != 0) (void)wait_for_load(lock, *entry, entry->pending_job);
  retire(*entry);
  entry->state = ModelState::kUnloaded;
  entry->error.clear();
  changed_.notify_all();
  return Status::ok();
}

Status ModelRegistry::reload(const std::string& name, std::optional<std::string> path) {
  std::unique_lock lock(mutex_);
  Entry* entry = find(name);
  if (entry == nullptr) return make_error(StatusCode::kNotFound, "no model '{}'", name);
  if (entry->pending_job != 0) (void)wait_for_load(lock, *entry, entry->pending_job);
  ModelSpec spec = entry->spec;
  if (path) spec.path = *path;
  queue_job(*entry, std::move(spec));
  return wait_for_load(lock, *entry, entry->pending_job);
}

Status ModelRegistry::reconfigure(std::vector<ModelSpec> specs) {
  std::vector<std::string> to_reload, to_load, to_unload;
  {
    std::lock_guard lock(mutex_);
    std::vector<std::string> wanted;
    for (ModelSpec& spec : specs) {
      const std::string name = spec.served_name();
      if (std::find(wanted.begin(), wanted.end(), name) != wanted.end()) {
        return make_error(StatusCode::kInvalidArgument, "two models are named '{}'", name);
      }
      wanted.push_back(name);
      Entry* entry = find(name);
      if (entry == nullptr) {
        auto added = std::make_unique<Entry>();
        added->name = name;
        added->keep_alive = std::chrono::milliseconds(spec.keep_alive_ms);
        added->spec = spec;
        if (spec.load_at_start) to_load.push_back(name);
        entries_.push_back(std::move(added));
        spdlog::info("models: '{}' added", name);
        continue;
      }
      entry->keep_alive = std::chrono::milliseconds(spec.keep_alive_ms);
      if (spec_key(spec) != spec_key(entry->spec)) {
        if (entry->current) to_reload.push_back(name);
        entry->spec = spec;
      } else {
        entry->spec.required = spec.required;
        entry->spec.load_at_start = spec.load_at_start;
      }
    }
    for (auto& entry : entries_) {
      if (!entry->removed && std::find(wanted.begin(), wanted.end(), entry->name) == wanted.end()) {
        to_unload.push_back(entry->name);
      }
    }
    if (wanted.empty()) return Status(StatusCode::kInvalidArgument, "no models to serve");
    default_model_ = wanted.front();
  }
  Status result = Status::ok();
  for (const std::string& name : to_unload) {
    if (Status s = unload(name); !s.is_ok()) result = s;
    std::lock_guard lock(mutex_);
    if (Entry* entry = find(name)) entry->removed = true;
    spdlog::info("models: '{}' removed", name);
  }
  for (const std::string& name : to_load) {
    if (Status s = load(name); !s.is_ok()) result = s;
  }
  for (const std::string& name : to_reload) {
    if (Status s = reload(name); !s.is_ok()) result = s;
  }
  return result;
}

std::vector<ModelStatus> ModelRegistry::status() const {
  std::lock_guard lock(mutex_);
  std::vector<ModelStatus> list;
  for (const auto& entry : entries_) {
    if (entry->removed) continue;
    ModelStatus& status = list.emplace_back();
    status.name = entry->name;
    status.aliases = entry->spec.aliases;
    status.path = entry->spec.path;
    status.state = entry->state;
    status.error = entry->error;
    status.required = entry->spec.required;
    status.loads = entry->loads;
    status.load_failures = entry->load_failures;
    status.last_load_seconds = entry->last_load_seconds;
    status.context_tokens = entry->spec.context_tokens;
    if (entry->current) {
      status.context_tokens = entry->current->service->context_tokens();
      status.created = entry->current->service->created();
      status.in_flight = entry->current->leases;
    }
  }
  return list;
}

void ModelRegistry::for_each_loaded(
    const std::function<void(const std::string&, ModelService&)>& visit) const {
  std::lock_guard lock(mutex_);
  for (const auto& entry : entries_) {
    if (entry->current && !entry->removed) visit(entry->name, *entry->current->service);
  }
}

void ModelRegistry::shutdown() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ && !loader_.joinable()) return;
    stopping_ = true;
  }
  changed_.notify_all();
  if (loader_.joinable()) loader_.join();
  if (janitor_.joinable()) janitor_.join();
  std::vector<std::shared_ptr<ModelLease::Version>> versions;
  std::vector<std::thread> retiring;
  {
    std::lock_guard lock(mutex_);
    for (auto& entry : entries_) {
      if (entry->current) versions.push_back(std::move(entry->current));
      entry->current.reset();
      entry->state = ModelState::kUnloaded;
    }
    retiring = std::move(retiring_);
  }
  for (std::thread& thread : retiring) thread.join();
  for (auto& version : versions) close_version(*version);
}

}  // namespace llamaserve
