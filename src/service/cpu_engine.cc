#include "service/cpu_engine.h"

#include <algorithm>

#include "model/weights.h"
#include "service/layout_factory.h"
#include "tokenizer/tokenizer.h"

namespace llamaserve {

Result<CpuEngine> open_cpu_engine(const CpuEngineOptions& options) {
  if (options.kv_sequences < 1) {
    return make_error(StatusCode::kInvalidArgument, "kv_sequences must be >= 1, got {}",
                      options.kv_sequences);
  }
  CpuEngine out;
  LS_ASSIGN_OR_RETURN(out.model, load_model(options.model_path));
  auto tokenizer = Tokenizer::from_gguf(*out.model->file);
  if (!tokenizer.is_ok()) return tokenizer.status().with_context(options.model_path);
  out.tokenizer = std::make_shared<const Tokenizer>(std::move(tokenizer).value());

  const int64_t n_ctx_train = out.model->config.n_ctx_train;
  const int64_t context = options.context_tokens > 0
                              ? options.context_tokens
                              : std::min<int64_t>(n_ctx_train > 0 ? n_ctx_train : 4096, 4096);
  ExecutorOptions executor_options;
  executor_options.device = options.device;
  executor_options.gpu_memory_utilization = options.gpu_memory_utilization;
  executor_options.threads = options.threads;
  executor_options.kv_capacity_tokens = context * options.kv_sequences;
  executor_options.max_batch_tokens = options.engine.max_batch_tokens;
  executor_options.max_context_tokens = context;
  LS_ASSIGN_OR_RETURN(std::unique_ptr<Executor> executor,
                      create_executor(out.model, executor_options));

  EngineConfig engine_config = options.engine;
  engine_config.max_context = static_cast<int32_t>(std::min<int64_t>(context, INT32_MAX));
  LS_ASSIGN_OR_RETURN(out.engine,
                      Engine::create(std::move(executor), out.tokenizer, engine_config));
  return out;
}

}  // namespace llamaserve
