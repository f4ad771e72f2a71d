// Opens a GGUF model as one ready Engine (run, chat, the JNI engine).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "engine/engine.h"

namespace llamaserve {

struct LoadedModel;
class Tokenizer;

struct CpuEngineOptions {
  std::string model_path;
  // "cpu", "cuda:N" or a device index (parallel/executor_factory.h).
  std::string device = "cpu";
  double gpu_memory_utilization = 0.90;  // CUDA devices: fraction of the device to use
  int threads = 0;                       // 0 = all online cores
  // Tokens per sequence; 0 = min(n_ctx_train, 4096). The KV cache holds
  // context_tokens * kv_sequences tokens.
  int64_t context_tokens = 0;
  int32_t kv_sequences = 1;
  EngineConfig engine;  // max_context is set from context_tokens
};

struct CpuEngine {
  std::shared_ptr<const LoadedModel> model;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::unique_ptr<Engine> engine;
};

// Loads the model and its tokenizer, builds the executor for options.device (the CPU by
// default) and starts the engine. Errors name the file and what was wrong with it.
Result<CpuEngine> open_cpu_engine(const CpuEngineOptions& options);

}  // namespace llamaserve
