#include "executor/cpu_executor.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "backend/cpu/cpu_backend.h"
#include "core/thread_pool.h"
#include "executor/batch_pieces.h"
#include "executor/batch_validation.h"

namespace llamaserve {
namespace {

class CpuExecutor final : public Executor {
 public:
  CpuExecutor(std::shared_ptr<const LoadedModel> model, const CpuExecutorOptions& options,
              int n_threads)
      : model_(std::move(model)), options_(options), pool_(n_threads) {}

  Status init(int32_t n_blocks) {
    const ModelConfig& c = model_->config;
    cpu::CpuBackendOptions backend_options;
    backend_options.reference_kernels = options_.reference_kernels;
    backend_options.isa = options_.cpu_isa;
    LS_ASSIGN_OR_RETURN(backend_, cpu::CpuBackend::create(model_, &pool_, backend_options));
    cpu::KvCacheGeometry geometry;
    geometry.first_layer = 0;
    geometry.n_layers = static_cast<int32_t>(c.n_layer);
    geometry.block_size = options_.kv_block_size;
    geometry.n_blocks = n_blocks;
    geometry.n_head_kv = c.n_head_kv;
    geometry.head_dim = c.head_dim;
    geometry.type = options_.kv_type;
    LS_ASSIGN_OR_RETURN(kv_, cpu::CpuKvCache::create(geometry));
    activations_ = std::make_unique<cpu::CpuActivations>(c, options_.max_batch_tokens, pool_.size(),
                                                         options_.kv_block_size);
    return Status::ok();
  }

  const ModelConfig& config() const override { return model_->config; }
  KvCacheInfo kv_info() const override { return kv_->info(); }

  std::string describe() const override {
    const KvCacheInfo info = kv_->info();
    return fmt::format(
        "cpu, {} threads, {} kernels, KV {} blocks x {} tokens ({}, {:.1f} MiB), max {} tokens "
        "per pass",
        pool_.size(),
        options_.reference_kernels ? "reference" : cpu::kernel_isa_name(backend_->kernel_isa()),
        info.n_blocks, info.block_size, type_name(options_.kv_type),
        static_cast<double>(info.bytes_per_block) * info.n_blocks / (1024.0 * 1024.0),
        options_.max_batch_tokens);
  }

  Status forward(const Batch& batch, std::span<float> logits) override {
    const int64_t n_vocab = model_->config.n_vocab;
    LS_RETURN_IF_ERROR(validate_batch(batch, kv_->info(), n_vocab, logits.size()));
    const LayerRange all{0, static_cast<int32_t>(model_->config.n_layer), true, true};
    return run_in_pieces(batch, options_.max_batch_tokens, n_vocab, logits, pieces_,
                         [&](const Batch& piece, std::span<float> piece_logits) {
                           return backend_->forward(piece, all, *kv_, *activations_, piece_logits);
                         });
  }

  bool returns_hidden() const override { return true; }

  Status forward_hidden(const Batch& batch, std::span<float> hidden) override {
    const ModelConfig& c = model_->config;
    LS_RETURN_IF_ERROR(
        validate_hidden_batch(batch, kv_->info(), c.n_vocab, c.n_embd, hidden.size()));
    const LayerRange all{0, static_cast<int32_t>(c.n_layer), true, true};
    // Rows of n_embd floats instead of n_vocab: the pieces scatter them alike.
    return run_in_pieces(batch, options_.max_batch_tokens, c.n_embd, hidden, pieces_,
                         [&](const Batch& piece, std::span<float> piece_hidden) {
                           return backend_->forward(piece, all, *kv_, *activations_, {},
                                                    piece_hidden);
                         });
  }

 private:
  std::shared_ptr<const LoadedModel> model_;
  CpuExecutorOptions options_;
  mutable ThreadPool pool_;
  std::unique_ptr<cpu::CpuBackend> backend_;
  std::unique_ptr<cpu::CpuKvCache> kv_;
  std::unique_ptr<cpu::CpuActivations> activations_;
  // Only for batches above max_batch_tokens.
  PieceScratch pieces_;  // for batches above max_batch_tokens
};

}  // namespace

Result<std::unique_ptr<Executor>> create_cpu_executor(std::shared_ptr<const LoadedModel> model,
                                                      const CpuExecutorOptions& options) {
  if (!model) return make_error(StatusCode::kInvalidArgument, "create_cpu_executor: no model");
  if (options.kv_block_size <= 0 || options.kv_block_size > 4096) {
    return make_error(StatusCode::kInvalidArgument, "kv_block_size = {} must be in [1, 4096]",
                      options.kv_block_size);
  }
  if (options.max_batch_tokens <= 0 || options.max_batch_tokens > 1 << 16) {
    return make_error(StatusCode::kInvalidArgument, "max_batch_tokens = {} must be in [1, 65536]",
                      options.max_batch_tokens);
  }
  if (options.threads < 0 || options.threads > 1024) {
    return make_error(StatusCode::kInvalidArgument, "threads = {} must be in [0, 1024]",
                      options.threads);
  }
  if (options.kv_type != TensorType::F16 && options.kv_type != TensorType::F32 &&
      options.kv_type != TensorType::Q8_0) {
    return make_error(StatusCode::kUnsupported,
                      "KV cache type {} is not supported on the CPU (F16, F32 or Q8_0)",
                      type_name(options.kv_type));
  }
  const ModelConfig& c = model->config;
  const uint64_t bytes_per_block =
      kv_bytes_per_token(c, options.kv_type) * static_cast<uint64_t>(options.kv_block_size);
  uint64_t n_blocks = 0;
  if (options.kv_capacity_bytes > 0) {
    n_blocks = options.kv_capacity_bytes / bytes_per_block;
  } else {
    const int64_t tokens = options.kv_capacity_tokens > 0 ? options.kv_capacity_tokens
                                                          : c.default_context_tokens() * 4;
    n_blocks = static_cast<uint64_t>((tokens + options.kv_block_size - 1) / options.kv_block_size);
  }
  if (n_blocks == 0 || n_blocks > (1u << 30)) {
    return make_error(StatusCode::kInvalidArgument,
                      "KV capacity gives {} blocks of {} bytes; it must hold at least one block",
                      n_blocks, bytes_per_block);
  }
  const int n_threads = options.threads > 0 ? options.threads : ThreadPool::default_threads();
  auto executor = std::make_unique<CpuExecutor>(std::move(model), options, n_threads);
  LS_RETURN_IF_ERROR(executor->init(static_cast<int32_t>(n_blocks)));
  return std::unique_ptr<Executor>(std::move(executor));
}

}  // namespace llamaserve
