// The configuration tree: everything a served model and the server around it can be told, as
// plain nested structs. `serve` fills one ServiceConfig once from flags, LLAMASERVE_* variables
// and --config (server/options.h: flag > environment > file > default); `run`, `chat`,
// `tp-worker` and the JNI engine fill the parts they take. The structs are passed down by
// reference or as members, never copied field by field into look-alikes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backend/cpu/cpu_isa.h"
#include "backend/kernel_tuning.h"
#include "engine/request.h"
#include "executor/tp_sums.h"
#include "quant/types.h"

namespace llamaserve {

// Where one model runs: devices and how the model is split over them.
struct LayoutSpec {
  // "cpu", "cuda:N", a device index N, or a CUDA device list "0,1,2,3" with replicas x
  // tensor_parallel x pipeline_parallel devices, consecutive groups per replica.
  std::string device = "cpu";
  int replicas = 1;           // whole-model engines behind the least-loaded router
  int tensor_parallel = 1;    // GPUs that split every layer's heads and FFN columns
  int pipeline_parallel = 1;  // GPUs that each run a contiguous block of layers
  std::vector<int32_t>
      layer_split;  // layers per pipeline stage (sums to n_layer); empty = balanced
  // Pipeline: micro-batches in flight per pass; 0 = one per stage, 1 = off.
  int micro_batches = 0;
  int threads = 0;  // CPU threads over all replicas; 0 = every online core
  // CPU kernels: AVX-512 where the CPU has it (auto), or AVX2 only (docs/cpu.md).
  cpu::CpuIsa cpu_isa = cpu::CpuIsa::kAuto;
  double gpu_memory_utilization = 0.90;  // CUDA: fraction of each device this model may use
  TpSums tp_sums;                        // how tensor-parallel ranks sum their partials

  // Tensor parallel with one process per GPU: this process is rank `tp_rank` (0 = the one
  // that serves) of a group of tensor_parallel processes on the one CUDA device of `device`.
  // -1: the ranks are threads of this process on the devices of `device`.
  int tp_rank = -1;
  std::string tp_listen_host;      // rank 0: where the other ranks connect ("" = every interface)
  int tp_listen_port = 29500;      // rank 0
  std::string tp_coordinator;      // ranks >= 1: rank 0's HOST:PORT
  int64_t tp_timeout_ms = 600000;  // each phase of the rendezvous
};

// What each engine of a model admits and how it steps.
struct EngineLimits {
  int max_running = 4;       // sequences generated concurrently, per replica
  int max_waiting = 0;       // each engine's queue bound; 0 = the engine's default
  int max_batch_tokens = 0;  // tokens per engine step (chunked-prefill budget); 0 = default
  // Prompt tokens of a step that also decodes (at least its decodes); -1 = the engine's
  // default, 0 = only max_batch_tokens bounds them.
  int prefill_chunk_tokens = -1;
  // Context positions that cost a prompt row beside decodes as much as the row; -1 = the
  // engine's default, 0 = every row counts 1.
  int prefill_context_per_row = -1;
  // Sample every token on the host from copied logits, even where the GPU could draw it.
  bool host_sampling = false;
  // Reuse the KV cache blocks of prompt prefixes earlier requests computed.
  bool prefix_caching = true;
};

// One model as it is served.
struct ModelSpec {
  std::string name;  // the id clients send as "model"; empty = the file name without .gguf
  // Further ids that name this model, such as a client's default model name ("gpt-4o-mini"
  // in a Spring AI or LangChain4j configuration); answers carry the served name.
  std::vector<std::string> aliases;
  std::string path;             // GGUF file
  std::string chat_template;    // llama2 | llama3 | chatml; empty = the model's own
  int64_t context_tokens = 0;   // tokens per sequence; 0 = ModelConfig::default_context_tokens()
  int64_t kv_cache_tokens = 0;  // KV capacity of each replica; 0 = context x max_running
  TensorType kv_cache_type = TensorType::F16;  // F16, or Q8_0 (about half the bytes)
  int warmup_tokens = 2;  // tokens of the warm-up generation on each replica; 0 = none
  // How /v1/embeddings pools the final hidden states of an input (mean, or the last token's).
  EmbeddingPooling embedding_pooling = EmbeddingPooling::kMean;
  LayoutSpec layout;
  EngineLimits engine;
  KernelTuning tuning;

  // Lifecycle in a server of several models (service/model_registry.h).
  int64_t keep_alive_ms = 0;  // unloaded after this long without a request; 0 = kept
  bool load_at_start = true;  // false: loaded by the first request for it
  bool required = true;       // /ready waits for it

  // The name served for this model: `name`, or the file name without its extension.
  std::string served_name() const;
};

// The HTTP server around the models.
struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;          // 0 = any free port (the chosen one is logged)
  int http_threads = 0;     // 0 = admission limit + 16
  std::string cors_origin;  // empty = no CORS headers at all

  int max_queue = 32;  // waiting requests over the whole server, beyond the running ones
  int64_t queue_timeout_ms = 30000;
  int64_t request_timeout_ms = 0;     // 0 = no limit
  int64_t max_body_bytes = 4 << 20;   // after de-chunking and decompression
  int64_t max_header_bytes = 32768;   // request line + header fields
  int max_connections = 8192;         // open at once; more are closed when accepted
  int64_t idle_timeout_ms = 60000;    // keep-alive connection without a request
  int64_t header_timeout_ms = 10000;  // first byte of a request to the end of its head
  int64_t body_timeout_ms = 30000;    // end of the head to the end of the body
  int64_t write_timeout_ms = 30000;   // a response write without progress
  int max_prompt_tokens = 0;          // 0 = the model's context - 1
  int max_tokens_limit = 4096;

  std::vector<std::string> api_keys;
  std::string api_key_file;
  // Keys of the admin API (/admin/models...); none: the admin API does not exist.
  std::vector<std::string> admin_api_keys;
  int max_loaded = 0;  // models loaded at once; 0 = no cap

  int64_t drain_timeout_ms = 30000;
  std::string config_path;  // --config JSON file

  // The process's CUDA_VISIBLE_DEVICES (none: unset), bound with the rest of serve's options:
  // the GPU metrics map CUDA ordinals to NVML devices through it.
  std::optional<std::string> cuda_visible_devices;
};

struct ServiceConfig {
  ServerConfig server;
  // The served models. Before the options are finalized, models.front() holds the values of
  // the flags, which every model starts from.
  std::vector<ModelSpec> models;
  // -m/--model as given: one PATH, or NAME=PATH[,key=value...] per model.
  std::vector<std::string> model_args;

  // Generation requests admitted at once (running or queued) before 429.
  int admission_limit() const;
};

}  // namespace llamaserve
