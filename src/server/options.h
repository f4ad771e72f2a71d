// Everything `llamaserve serve` can be told, as one plain struct, and the one place that
// declares its flags. Every flag can also come from LLAMASERVE_<NAME> and from the JSON
// config file given by --config (see config_layer.h): flag > env > file > default.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/status.h"
#include "service/layout_factory.h"

namespace llamaserve::server {

struct ServerOptions {
  // Model and executor.
  std::string model_path;
  std::string model_name;  // the id clients send as "model"; default: file name sans .gguf
  int threads = 0;         // CPU executor threads over all replicas; 0 = every online core
  // cpu | cuda:N | N | a CUDA device list "0,1,2,3" (parallel/executor_factory.h): replicas x
  // tensor_parallel x pipeline_parallel devices, consecutive groups per replica.
  std::string device = "cpu";
  int replicas = 1;                  // whole-model engines behind the least-loaded router
  int tensor_parallel = 1;           // --tp: GPUs that split every layer's heads and FFN (NCCL)
  int pipeline_parallel = 1;         // --pp: GPUs that each run a contiguous block of layers
  std::vector<int32_t> layer_split;  // layers per pipeline stage; empty = balanced
  int micro_batches = 0;  // --micro-batches: pipeline micro-batches in flight; 0 = pp, 1 = off
  double gpu_memory_utilization = 0.90;  // CUDA: fraction of the device's memory to use
  int ctx_size = 0;  // tokens per sequence (prompt + output); 0 = training context, <= 8192
  // KV cache capacity of each replica, over its sequences; 0 = ctx_size * max_running
  int kv_cache_tokens = 0;
  int max_batch_tokens = 0;   // tokens per engine step (chunked prefill budget); 0 = engine default
  std::string chat_template;  // llama2 | llama3 | chatml; empty = detect from the model
  // Tensor parallel with one process per GPU (--tp-rank 0): this server is rank 0 of a group
  // of --tp processes, on the one CUDA device of --device, and the other ranks (`llamaserve
  // tp-worker`) connect to its port tp_listen_port. -1: the --tp ranks are threads of this
  // process on the devices of --devices.
  int tp_rank = -1;
  int tp_listen_port = 29500;
  int64_t tp_timeout_ms = 600000;  // each phase of the rendezvous (ranks joining, uploading)

  // Transport.
  std::string host = "127.0.0.1";
  int port = 8080;          // 0 = any free port (the chosen one is logged)
  int http_threads = 0;     // 0 = admission_limit() + 16
  std::string cors_origin;  // empty = no CORS headers at all

  // Admission and limits.
  int max_running = 4;  // per replica
  int max_queue = 32;   // over the whole server
  int64_t queue_timeout_ms = 30000;
  int64_t request_timeout_ms = 0;  // 0 = no limit
  int64_t max_body_bytes = 4 << 20;
  int max_prompt_tokens = 0;  // 0 = ctx_size - 1
  int max_tokens_limit = 4096;
  // Sample every token on the host from copied logits, even where the GPU could draw it.
  bool host_sampling = false;

  // Auth.
  std::vector<std::string> api_keys;
  std::string api_key_file;

  // Lifecycle.
  int64_t drain_timeout_ms = 30000;
  int warmup_tokens = 2;

  std::string config_path;

  // Generation requests admitted at once (running or queued) before 429.
  int admission_limit() const { return replicas * max_running + max_queue; }
};

// The executor options every replica starts from (devices, parallelism, threads, batch and
// memory limits); the caller adds what depends on the model (context, KV capacity) and
// splits it with replica_options().
ExecutorOptions base_executor_options(const ServerOptions& options);

// With --tp-rank 0: this server's part in its group of tensor-parallel processes.
TpProcessOptions tp_process_options(const ServerOptions& options);

// Declares every option on `app` (bound to `options`) and gives each an LLAMASERVE_*
// environment variable. --model is not marked required here because it may come from the
// config file; finalize_server_options() checks it.
void add_server_options(CLI::App& app, ServerOptions& options);

// After parsing: applies --config (to options neither flag nor env set), reads
// --api-key-file, fills derived defaults and checks the options against each other.
Status finalize_server_options(CLI::App& app, ServerOptions& options);

}  // namespace llamaserve::server
