#include "server/options.h"

#include <algorithm>
#include <fstream>
#include <map>

#include <fmt/format.h>

#include "engine/engine.h"
#include "model/config.h"
#include "server/config_layer.h"
#include "server/model_list.h"
#include "service/model_service.h"

namespace llamaserve::server {

void add_cpu_isa_option(CLI::App& app, LayoutSpec& layout) {
  app.add_option_function<std::string>(
         "--cpu-isa",
         [&layout](const std::string& isa) { layout.cpu_isa = cpu::parse_cpu_isa(isa).value(); },
         "CPU kernels: auto (AVX-512 VNNI and AMX where the CPU has them, else AVX2), avx512 "
         "(AVX-512 VNNI where the CPU has it, no AMX) or avx2 (AVX2 only)")
      ->check(CLI::IsMember({"auto", "avx512", "avx2"}))
      ->default_str("auto");
}

void add_kv_cache_type_option(CLI::App& app, ModelSpec& m) {
  app.add_option_function<std::string>(
         "--kv-cache-type",
         [&m](const std::string& type) { m.kv_cache_type = parse_kv_cache_type(type).value(); },
         "KV cache elements: f16, or q8_0 (8-bit blocks of 32 with a scale each: about half "
         "the memory per token)")
      ->check(CLI::IsMember({"f16", "q8_0"}))
      ->default_str("f16");
}

void add_kernel_options(CLI::App& app, ModelSpec& m) {
  LayoutSpec& layout = m.layout;
  app.add_option_function<std::string>(
         "--tp-sums",
         [&layout](const std::string& mode) {
           layout.tp_sums.mode = parse_tp_sum_mode(mode).value();
         },
         "Tensor parallel: how the ranks sum their partials: fused (decode sums fused into "
         "peer-to-peer kernels), peer (one-kernel peer all-reduce) or nccl")
      ->check(CLI::IsMember({"fused", "peer", "nccl"}))
      ->default_str("fused");
  app.add_option_function<std::string>(
         "--tp-gemm-sums",
         [&layout](const std::string& type) { layout.tp_sums.half_gemm_sums = type == "half"; },
         "Tensor parallel: sum the partials of GEMM output projections as halves or as floats")
      ->check(CLI::IsMember({"half", "float"}))
      ->default_str("half");
  app.add_flag_function(
      "--no-pdl", [&m](int64_t count) { m.tuning.pdl = count == 0; },
      "Launch CUDA kernels without programmatic dependent launch (for profilers and sanitizers)");
  app.add_flag("--op-times", m.tuning.op_times,
               "Time every operation of every layer on the GPU and log a report at shutdown "
               "(slow: for profiling)");
}

void add_service_options(CLI::App& app, ServiceConfig& config) {
  if (config.models.empty()) config.models.emplace_back();
  ModelSpec& m = config.models.front();
  LayoutSpec& layout = m.layout;
  ServerConfig& o = config.server;
  app.add_option("-m,--model", config.model_args,
                 "GGUF model file; or, repeated, NAME=PATH[,key=value...] per model (keys: "
                 "device tp pp replicas threads cpu-isa ctx-size max-running max-batch-tokens "
                 "prefill-chunk-tokens prefill-context-per-row no-prefix-cache "
                 "kv-cache-tokens chat-template warmup-tokens embedding-pooling keep-alive "
                 "required load)");
  app.add_option("--model-name", m.name,
                 "Model id served in /v1/models and accepted as \"model\" (default: file name)");
  app.add_option("--max-loaded", o.max_loaded,
                 "Models loaded at once; loading another unloads the least recently used idle "
                 "one (0 = no cap)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  app.add_option("--admin-api-key", o.admin_api_keys,
                 "Key of the admin API (/admin/models...; repeatable); without one the admin "
                 "API does not exist");
  app.add_option("--threads", layout.threads,
                 "CPU threads for the model, shared by the replicas (0 = all cores)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  add_cpu_isa_option(app, layout);
  app.add_option("--device,--devices", layout.device,
                 "cpu, cuda:N, a CUDA device index N, or a device list 0,1,2,3 "
                 "(replicas x tp x pp devices)")
      ->envname("LLAMASERVE_DEVICES")
      ->capture_default_str();
  app.add_option("--replicas", layout.replicas,
                 "Whole-model replicas behind a least-loaded router, each on its own devices "
                 "(on the CPU, its share of --threads)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--tp", layout.tensor_parallel,
                 "Tensor parallel: GPUs per replica that split every layer's heads and FFN "
                 "(NCCL all-reduce)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--pp", layout.pipeline_parallel,
                 "Pipeline parallel: GPUs per replica that each run a contiguous block of layers")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--layer-split", layout.layer_split,
                 "Layers per pipeline stage, e.g. 16,16 (default: balanced by weight bytes)")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--tp-rank", layout.tp_rank,
                 "Tensor parallel with one process per GPU: 0 makes this server rank 0 of --tp "
                 "processes on the one GPU of --device; the others run `llamaserve tp-worker` "
                 "(default: the --tp ranks are threads of this server)")
      ->check(CLI::Range(0, 63));
  app.add_option("--tp-listen", layout.tp_listen_port,
                 "With --tp-rank 0: the TCP port the other ranks connect to (every interface)")
      ->check(CLI::Range(1, 65535))
      ->capture_default_str();
  app.add_option("--tp-timeout-ms", layout.tp_timeout_ms,
                 "With --tp-rank 0: how long each phase of the rendezvous may take (the ranks "
                 "joining, uploading their weights)")
      ->check(CLI::Range(int64_t{1}, int64_t{86400000}))
      ->capture_default_str();
  app.add_option("--micro-batches", layout.micro_batches,
                 "Pipeline: micro-batches in flight when a step has many sequences, so that every "
                 "stage works at once (0 = one per stage, 1 = the stages in turn)")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  app.add_option("--gpu-memory-utilization", layout.gpu_memory_utilization,
                 "Fraction of the GPU's memory this server may use (CUDA devices)")
      ->check(CLI::Range(0.01, 1.0))
      ->capture_default_str();
  app.add_option(
         "--ctx-size", m.context_tokens,
         "Tokens per sequence, prompt plus output (0 = the model's training context, at most 8192)")
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str();
  app.add_option("--kv-cache-tokens", m.kv_cache_tokens,
                 "KV cache capacity in tokens of each replica, over its sequences "
                 "(0 = ctx-size x max-running)")
      ->check(CLI::Range(0, 1 << 30))
      ->capture_default_str();
  add_kv_cache_type_option(app, m);
  app.add_option("--max-batch-tokens", m.engine.max_batch_tokens,
                 "Tokens per engine step, the chunked-prefill budget (0 = engine default)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();

  app.add_option("--prefill-chunk-tokens", m.engine.prefill_chunk_tokens,
                 fmt::format("Prompt tokens of a step that also decodes other sequences (at "
                             "least as many as it decodes), which bounds how much a prompt burst "
                             "delays their next tokens (-1 = engine default, {}; 0 = only "
                             "--max-batch-tokens)",
                             EngineConfig{}.prefill_chunk_tokens))
      ->check(CLI::Range(-1, 1 << 20))
      ->capture_default_str();
  app.add_option("--prefill-context-per-row", m.engine.prefill_context_per_row,
                 fmt::format("Context positions that make a prompt row beside decodes count as "
                             "one more row against --prefill-chunk-tokens: late chunks of long "
                             "prompts, whose rows attend to many positions, take fewer rows (-1 = "
                             "engine default, {}; 0 = a row counts 1)",
                             EngineConfig{}.prefill_context_per_row))
      ->check(CLI::Range(-1, 1 << 30))
      ->capture_default_str();

  app.add_option("--model-alias", m.aliases,
                 "Another name clients may use for the model (repeatable, or comma-separated), "
                 "e.g. the default model name of an OpenAI client")
      ->delimiter(',');

  app.add_option("--chat-template", m.chat_template,
                 "Chat format: llama2, llama3 or chatml (default: detected from the model)")
      ->check(CLI::IsMember({"llama2", "llama3", "chatml"}));

  app.add_option_function<std::string>(
         "--embedding-pooling",
         [&m](const std::string& name) {
           m.embedding_pooling = parse_embedding_pooling(name).value();
         },
         "How /v1/embeddings pools an input's final hidden states: mean (over every token) or "
         "last (the last token's)")
      ->check(CLI::IsMember({"mean", "last"}))
      ->default_str("mean");

  app.add_option("--host", o.host, "Address to listen on")->capture_default_str();
  app.add_option("--port", o.port, "TCP port (0 = any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app.add_option("--http-threads", o.http_threads,
                 "HTTP worker threads; must exceed replicas x max-running + max-queue "
                 "(0 = replicas x max-running + max-queue + 16)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  app.add_option("--cors-origin", o.cors_origin,
                 "Allowed CORS origin (\"*\" for any); CORS is off when not given");

  app.add_option("--max-running", m.engine.max_running,
                 "Sequences each replica generates concurrently")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--max-queue", o.max_queue,
                 "Requests waiting beyond replicas x max-running before 429")
      ->check(CLI::Range(0, 65536))
      ->capture_default_str();
  app.add_option("--queue-timeout-ms", o.queue_timeout_ms,
                 "Longest wait in the queue before 429 (0 = no limit)")
      ->check(CLI::Range(int64_t{0}, int64_t{86400000}))
      ->capture_default_str();
  app.add_option("--request-timeout-ms", o.request_timeout_ms,
                 "Longest time for one request from submission (0 = no limit)")
      ->check(CLI::Range(int64_t{0}, int64_t{86400000}))
      ->capture_default_str();
  app.add_option("--max-body-bytes", o.max_body_bytes, "Largest request body (larger: 413)")
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 34))
      ->capture_default_str();
  app.add_option("--max-header-bytes", o.max_header_bytes,
                 "Largest request head: request line and header fields (larger: 431)")
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 24))
      ->capture_default_str();
  app.add_option("--max-connections", o.max_connections,
                 "Client connections open at once; more are closed as they arrive")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--idle-timeout-ms", o.idle_timeout_ms,
                 "How long a keep-alive connection may wait for its next request")
      ->check(CLI::Range(int64_t{1}, int64_t{86400000}))
      ->capture_default_str();
  app.add_option("--header-timeout-ms", o.header_timeout_ms,
                 "From a request's first byte to the end of its head (then 408)")
      ->check(CLI::Range(int64_t{1}, int64_t{86400000}))
      ->capture_default_str();
  app.add_option("--body-timeout-ms", o.body_timeout_ms,
                 "From the end of a request's head to the end of its body (then 408)")
      ->check(CLI::Range(int64_t{1}, int64_t{86400000}))
      ->capture_default_str();
  app.add_option("--write-timeout-ms", o.write_timeout_ms,
                 "How long a response write may make no progress before the connection is "
                 "closed (a generation is then cancelled)")
      ->check(CLI::Range(int64_t{1}, int64_t{86400000}))
      ->capture_default_str();
  app.add_option("--max-prompt-tokens", o.max_prompt_tokens,
                 "Longest prompt in tokens (0 = ctx-size - 1)")
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str();
  app.add_option("--max-tokens-limit", o.max_tokens_limit,
                 "Largest max_tokens a request may ask for")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  app.add_flag_function(
      "--no-prefix-cache", [&m](int64_t count) { m.engine.prefix_caching = count <= 0; },
      "Compute every prompt in full instead of reusing the KV cache blocks of prefixes earlier "
      "requests computed (prefix caching is on by default)");
  app.add_flag("--host-sampling", m.engine.host_sampling,
               "Sample every token on the CPU from copied logits (default: a GPU draws the "
               "tokens of requests without penalties, min_p or logprobs)");

  app.add_option("--api-key", o.api_keys,
                 "Accepted bearer token (repeatable); when any key is set every endpoint but "
                 "/health and the chat page at / requires one");
  app.add_option("--api-key-file", o.api_key_file,
                 "File with one accepted key per line (blank lines and # comments ignored)");

  app.add_option("--drain-timeout-ms", o.drain_timeout_ms,
                 "On SIGTERM/SIGINT, how long in-flight requests may take to finish")
      ->check(CLI::Range(int64_t{0}, int64_t{3600000}))
      ->capture_default_str();
  app.add_option("--warmup-tokens", m.warmup_tokens,
                 "Tokens generated by the warm-up request before /ready turns 200 (0: no warm-up)")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  add_kernel_options(app, m);
  app.add_option("--config", o.config_path,
                 "JSON file of options (keys = flag names without dashes); flags and "
                 "LLAMASERVE_* variables take precedence");
  bind_env_vars(app, "LLAMASERVE_");
  // Not a flag: the CUDA runtime's own variable, recorded with the rest of the configuration
  // (the GPU metrics map CUDA ordinals to NVML devices through it). Bound after the
  // LLAMASERVE_* names so that it keeps its own.
  app.add_option_function<std::string>(
         "--cuda-visible-devices",
         [&o](const std::string& visible) { o.cuda_visible_devices = visible; })
      ->envname("CUDA_VISIBLE_DEVICES")
      ->group("");
}

namespace {

Status read_api_key_file(const std::string& path, std::vector<std::string>& keys) {
  std::ifstream in(path);
  if (!in) return make_error(StatusCode::kIo, "cannot open --api-key-file '{}'", path);
  std::string line;
  while (std::getline(in, line)) {
    const size_t begin = line.find_first_not_of(" \t\r");
    if (begin == std::string::npos || line[begin] == '#') continue;
    const size_t end = line.find_last_not_of(" \t\r");
    keys.push_back(line.substr(begin, end - begin + 1));
  }
  return Status::ok();
}

}  // namespace

Status finalize_service_config(CLI::App& app, ServiceConfig& config) {
  ServerConfig& o = config.server;
  nlohmann::json file_models;
  if (!o.config_path.empty()) {
    auto parsed = read_json_config_file(o.config_path);
    if (!parsed) return parsed.status();
    if (auto it = parsed->find("models"); it != parsed->end()) {
      file_models = std::move(*it);
      parsed->erase("models");
    }
    LS_RETURN_IF_ERROR(
        apply_json_config(app, *parsed, fmt::format("config file '{}'", o.config_path)));
  }
  // models.front() holds the flags' values: every model starts from them.
  const ModelSpec defaults = config.models.front();
  std::vector<ModelSpec> models;
  const bool one_path =
      config.model_args.size() == 1 && config.model_args.front().find('=') == std::string::npos;
  if (one_path) {
    models.push_back(defaults);
    models.back().path = config.model_args.front();
  } else {
    for (const std::string& arg : config.model_args) {
      auto spec = parse_model_arg(arg, defaults);
      if (!spec) return spec.status();
      models.push_back(std::move(spec).value());
    }
  }
  if (!file_models.is_null()) {
    if (!file_models.is_array()) {
      return make_error(StatusCode::kInvalidArgument, "config file '{}': \"models\" must be a list",
                        o.config_path);
    }
    for (const nlohmann::json& object : file_models) {
      auto spec = parse_model_object(object, defaults);
      if (!spec) return spec.status().with_context(fmt::format("config file '{}'", o.config_path));
      // A model named on the command line wins over the file's of the same name.
      const bool named = std::any_of(models.begin(), models.end(), [&](const ModelSpec& m) {
        return m.served_name() == spec->served_name();
      });
      if (!named) models.push_back(std::move(spec).value());
    }
  }
  if (models.empty()) {
    return Status(StatusCode::kInvalidArgument,
                  "no model: pass -m/--model, set LLAMASERVE_MODEL or put \"model\" or "
                  "\"models\" in --config");
  }
  if (models.size() > 1) {
    std::vector<std::string> names;
    for (ModelSpec& spec : models) {
      const std::string name = spec.served_name();
      if (std::find(names.begin(), names.end(), name) != names.end()) {
        return make_error(StatusCode::kInvalidArgument, "two models are named '{}'", name);
      }
      names.push_back(name);
    }
    // With a cap, only the first models that fit it load at start (unless told otherwise).
    int at_start = 0;
    for (ModelSpec& spec : models) {
      if (o.max_loaded > 0 && spec.load_at_start && at_start >= o.max_loaded) {
        spec.load_at_start = false;
        spec.required = false;
      }
      at_start += spec.load_at_start;
    }
  }
  config.models = std::move(models);
  if (!o.api_key_file.empty()) LS_RETURN_IF_ERROR(read_api_key_file(o.api_key_file, o.api_keys));
  std::erase_if(o.api_keys, [](const std::string& key) { return key.empty(); });
  for (ModelSpec& spec : config.models) {
    if (spec.layout.tp_rank > 0) {
      return make_error(StatusCode::kInvalidArgument,
                        "--tp-rank {}: the server is rank 0 of its tensor-parallel group; start "
                        "the other ranks with `llamaserve tp-worker --tp-rank R`",
                        spec.layout.tp_rank);
    }
    // Device counts and combinations are checked now, before any model loads.
    Status layout = check_layout(spec);
    if (!layout.is_ok() && config.models.size() > 1) {
      layout = layout.with_context(fmt::format("model '{}'", spec.served_name()));
    }
    LS_RETURN_IF_ERROR(layout);
  }
  const int admitted = config.admission_limit();
  if (o.http_threads == 0) o.http_threads = admitted + 16;
  if (o.http_threads <= admitted) {
    // Every admitted request holds an HTTP thread while it runs or waits; without spare
    // threads a request past the limits would wait for a thread instead of getting 429.
    return make_error(StatusCode::kInvalidArgument,
                      "--http-threads ({}) must be larger than --replicas x --max-running + "
                      "--max-queue ({})",
                      o.http_threads, admitted);
  }
  // Each engine's queue bound is a backstop that the server's own admission never reaches.
  for (ModelSpec& spec : config.models) spec.engine.max_waiting = admitted;
  return Status::ok();
}

}  // namespace llamaserve::server
