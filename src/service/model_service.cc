#include "service/model_service.h"

#include <algorithm>
#include <filesystem>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "service/layout_factory.h"
#include "service/load_progress.h"
#include "service/warm_up.h"

namespace llamaserve {
namespace {

int64_t unix_seconds_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Sequences per forward pass the executors are sized for: a decode step of max_running
// sequences and the padding sequence the CUDA executor adds to decode steps it replays as
// graphs, and at least 256 (embedding passes pack many short inputs).
int32_t max_pass_seqs(const ModelSpec& spec) { return std::max(256, spec.engine.max_running + 1); }

}  // namespace

std::string ModelSpec::served_name() const {
  return name.empty() ? std::filesystem::path(path).stem().string() : name;
}

int ServiceConfig::admission_limit() const {
  int running = 0;
  for (const ModelSpec& model : models) running += model.layout.replicas * model.engine.max_running;
  return running + server.max_queue;
}

ExecutorOptions executor_options(const ModelSpec& spec, int64_t context_tokens) {
  const LayoutSpec& layout = spec.layout;
  ExecutorOptions options;
  options.device = layout.device;
  options.tensor_parallel = layout.tensor_parallel;
  options.pipeline_parallel = layout.pipeline_parallel;
  options.layer_split = layout.layer_split;
  options.pipeline_micro_batches = layout.micro_batches;
  options.threads = layout.threads;
  options.cpu_isa = layout.cpu_isa;
  options.gpu_memory_utilization = layout.gpu_memory_utilization;
  options.tp_sums = layout.tp_sums;
  options.tuning = spec.tuning;
  options.max_batch_tokens = spec.engine.max_batch_tokens;
  // Each replica has its own KV cache and runs up to max_running sequences.
  options.kv_capacity_tokens =
      spec.kv_cache_tokens > 0 ? spec.kv_cache_tokens : context_tokens * spec.engine.max_running;
  options.kv_type = spec.kv_cache_type;
  options.max_context_tokens = context_tokens;
  options.max_seqs = max_pass_seqs(spec);
  return options;
}

EngineConfig engine_config(const ModelSpec& spec, int64_t context_tokens) {
  EngineConfig config;
  config.max_running = spec.engine.max_running;
  if (spec.engine.max_waiting > 0) config.max_waiting = spec.engine.max_waiting;
  if (spec.engine.max_batch_tokens > 0) config.max_batch_tokens = spec.engine.max_batch_tokens;
  if (spec.engine.prefill_chunk_tokens >= 0)
    config.prefill_chunk_tokens = spec.engine.prefill_chunk_tokens;
  if (spec.engine.prefill_context_per_row >= 0)
    config.prefill_context_per_row = spec.engine.prefill_context_per_row;
  config.max_context = static_cast<int32_t>(std::min<int64_t>(context_tokens, INT32_MAX));
  config.device_sampling = !spec.engine.host_sampling;
  config.prefix_caching = spec.engine.prefix_caching;
  // Embedding passes stay within what the executors were sized for.
  config.max_embedding_seqs = max_pass_seqs(spec);
  return config;
}

TpProcessOptions tp_process_options(const LayoutSpec& layout) {
  TpProcessOptions process;
  process.rank = layout.tp_rank;
  process.listen_host = layout.tp_listen_host;
  process.listen_port = layout.tp_listen_port;
  process.coordinator = layout.tp_coordinator;
  process.rendezvous_timeout_ms = layout.tp_timeout_ms;
  return process;
}

Status check_layout(const ModelSpec& spec) {
  const LayoutSpec& layout = spec.layout;
  if (!layout.layer_split.empty() &&
      static_cast<int>(layout.layer_split.size()) != layout.pipeline_parallel) {
    return make_error(StatusCode::kInvalidArgument,
                      "--layer-split lists {} stages but --pp is {}: give one layer count per "
                      "pipeline stage",
                      layout.layer_split.size(), layout.pipeline_parallel);
  }
  const ExecutorOptions options = executor_options(spec, 0);
  if (layout.tp_rank < 0) return replica_options(options, layout.replicas).status();
  if (layout.replicas != 1) {
    return make_error(StatusCode::kInvalidArgument,
                      "--tp-rank {} serves one replica, the group's; --replicas is {}",
                      layout.tp_rank, layout.replicas);
  }
  return tp_process_device(options, tp_process_options(layout)).status();
}

Result<std::unique_ptr<ModelService>> ModelService::open(const ModelSpec& spec,
                                                         const OpenHooks& hooks) {
  if (spec.path.empty()) return Status(StatusCode::kInvalidArgument, "no model file given");
  if (spec.layout.tp_rank > 0) {
    return make_error(StatusCode::kInvalidArgument,
                      "rank {} of a tensor-parallel group runs as `llamaserve tp-worker`; the "
                      "served model is rank 0",
                      spec.layout.tp_rank);
  }
  LS_RETURN_IF_ERROR(check_layout(spec));
  std::unique_ptr<ModelService> service(new ModelService());
  service->spec_ = spec;
  service->name_ = spec.served_name();
  service->created_ = unix_seconds_now();
  LS_RETURN_IF_ERROR(service->start(hooks));
  return service;
}

Status ModelService::start(const OpenHooks& hooks) {
  const auto start = std::chrono::steady_clock::now();
  LS_ASSIGN_OR_RETURN(model_,
                      load_model_for_device(spec_.path, spec_.layout.device, hooks.show_progress));
  auto tokenizer = Tokenizer::from_gguf(*model_->file);
  if (!tokenizer.is_ok()) return tokenizer.status().with_context(spec_.path);
  tokenizer_ = std::make_shared<const Tokenizer>(std::move(tokenizer).value());
  constraints_ = std::make_unique<grammar::ConstraintCache>(tokenizer_);

  ChatTemplateTokens special;
  if (const auto bos = tokenizer_->bos_id()) special.bos_token = tokenizer_->token_piece(*bos);
  if (const auto eos = tokenizer_->eos_id()) special.eos_token = tokenizer_->token_piece(*eos);
  auto chat_template = ChatTemplate::for_model(tokenizer_->data().chat_template,
                                               spec_.chat_template, std::move(special));
  if (chat_template.is_ok()) {
    chat_template_ = std::move(chat_template).value();
    // A built-in format knows no tools: the server describes them itself.
    if (chat_template_->kind() == ChatTemplateKind::kJinja) {
      tool_support_ = toolcall::detect_tool_support(tokenizer_->data().chat_template);
    }
  } else if (!spec_.chat_template.empty()) {
    return chat_template.status().with_context("chat template");
  } else {
    spdlog::warn("{}: no usable chat template ({}); chat requests will be refused", name_,
                 chat_template.status().to_string());
  }

  context_tokens_ =
      spec_.context_tokens > 0 ? spec_.context_tokens : model_->config.default_context_tokens();
  const ExecutorOptions base = executor_options(spec_, context_tokens_);
  const bool process_group = spec_.layout.tp_rank == 0;
  std::vector<ExecutorOptions> replicas = {base};
  if (!process_group) {
    LS_ASSIGN_OR_RETURN(replicas, replica_options(base, spec_.layout.replicas));
  }
  TpProcessOptions process = tp_process_options(spec_.layout);
  process.on_listening = hooks.on_tp_listening;

  const EngineConfig config = engine_config(spec_, context_tokens_);
  std::vector<std::unique_ptr<Engine>> engines;
  for (size_t i = 0; i < replicas.size(); ++i) {
    ExecutorOptions replica = std::move(replicas[i]);
    std::optional<LoadProgress> upload;  // weights going to a GPU
    if (hooks.show_progress) {
      upload.emplace(spec_.path);
      replica.on_upload_progress = upload->callback();
    }
    auto executor = process_group ? create_tp_rank0_executor(model_, replica, process)
                                  : create_executor(model_, replica);
    if (upload) upload->finish();
    if (!executor.is_ok() && replicas.size() > 1) {
      return executor.status().with_context(fmt::format("replica {} ({})", i, replica.device));
    }
    LS_RETURN_IF_ERROR(executor.status());
    LS_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                        Engine::create(std::move(executor).value(), tokenizer_, config));
    engines.push_back(std::move(engine));
  }
  LS_ASSIGN_OR_RETURN(engines_, EngineGroup::create(std::move(engines)));
  LS_RETURN_IF_ERROR(warm_up(config));
  spdlog::info("{}: loaded {} in {:.1f} s: {}", name_, spec_.path,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
               engines_->describe());
  return Status::ok();
}

// The engines' own limits bound the warm-up's passes (service/warm_up.h).
Status ModelService::warm_up(const EngineConfig& config) {
  WarmupLimits limits;
  limits.tokens = spec_.warmup_tokens;
  limits.max_batch_tokens = config.max_batch_tokens;
  limits.max_running = config.max_running;
  limits.max_waiting = config.max_waiting;
  limits.max_context = engines_->max_context();
  auto devices = parse_devices(spec_.layout.device);
  limits.every_shape =
      devices.is_ok() && !devices->empty() && devices->front().kind == DeviceChoice::Kind::kCuda;
  return llamaserve::warm_up(*engines_, limits);
}

ModelService::~ModelService() { close(); }

void ModelService::close() {
  if (engines_) engines_->shutdown();
  engines_.reset();  // frees the executors, KV caches and device memory
  model_.reset();
}

Status run_tp_worker(const ModelSpec& spec, const OpenHooks& hooks) {
  if (spec.path.empty()) return Status(StatusCode::kInvalidArgument, "no model file given");
  LS_ASSIGN_OR_RETURN(std::shared_ptr<const LoadedModel> model,
                      load_model_for_device(spec.path, spec.layout.device, hooks.show_progress));
  ExecutorOptions options = executor_options(spec, 0);
  std::optional<LoadProgress> upload;  // the shard going to the GPU
  if (hooks.show_progress) {
    upload.emplace(spec.path);
    options.on_upload_progress = upload->callback();
  }
  const Status status =
      run_tp_worker_process(std::move(model), options, tp_process_options(spec.layout));
  if (upload) upload->finish();
  return status;
}

}  // namespace llamaserve
