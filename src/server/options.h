// Everything `llamaserve serve` can be told, as one plain struct, and the one place that
// declares its flags. Every flag can also come from LLAMASERVE_<NAME> and from the JSON
// config file given by --config (see config_layer.h): flag > env > file > default.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/status.h"

namespace llamaserve::server {

struct ServerOptions {
  // Model and executor.
  std::string model_path;
  std::string model_name;      // the id clients send as "model"; default: file name sans .gguf
  int threads = 0;             // CPU executor threads; 0 = every online core
  std::string device = "cpu";  // cpu | cuda:N | N (parallel/executor_factory.h)
  double gpu_memory_utilization = 0.90;  // CUDA: fraction of the device's memory to use
  int ctx_size = 0;          // tokens per sequence (prompt + output); 0 = training context, <= 8192
  int kv_cache_tokens = 0;   // KV cache capacity over all sequences; 0 = ctx_size * max_running
  int max_batch_tokens = 0;  // tokens per engine step (chunked prefill budget); 0 = engine default
  std::string chat_template;  // llama2 | llama3 | chatml; empty = detect from the model

  // Transport.
  std::string host = "127.0.0.1";
  int port = 8080;          // 0 = any free port (the chosen one is logged)
  int http_threads = 0;     // 0 = max_running + max_queue + 16
  std::string cors_origin;  // empty = no CORS headers at all

  // Admission and limits.
  int max_running = 4;
  int max_queue = 32;
  int64_t queue_timeout_ms = 30000;
  int64_t request_timeout_ms = 0;  // 0 = no limit
  int64_t max_body_bytes = 4 << 20;
  int max_prompt_tokens = 0;  // 0 = ctx_size - 1
  int max_tokens_limit = 4096;

  // Auth.
  std::vector<std::string> api_keys;
  std::string api_key_file;

  // Lifecycle.
  int64_t drain_timeout_ms = 30000;
  int warmup_tokens = 2;

  std::string config_path;
};

// Declares every option on `app` (bound to `options`) and gives each an LLAMASERVE_*
// environment variable. --model is not marked required here because it may come from the
// config file; finalize_server_options() checks it.
void add_server_options(CLI::App& app, ServerOptions& options);

// After parsing: applies --config (to options neither flag nor env set), reads
// --api-key-file, fills derived defaults and checks the options against each other.
Status finalize_server_options(CLI::App& app, ServerOptions& options);

}  // namespace llamaserve::server
