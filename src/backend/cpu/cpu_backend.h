// The CPU Backend: runs a LayerRange of a LLaMA-family model over a Batch, with its KV in a
// CpuKvCache and its working memory in CpuActivations. Executors (src/parallel) own the
// thread pool, the cache and the activations and string the stages together.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "backend/batch.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/kv_cache.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/packed_weight.h"
#include "backend/layer_range.h"
#include "core/aligned_vector.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "model/weights.h"

namespace llamaserve::cpu {

struct CpuBackendOptions {
  // Run every op on the plain reference kernels (slow; for validation and debugging).
  bool reference_kernels = false;
  // The optimized kernels' instruction set: AVX-512 where the CPU has it, or AVX2 only.
  CpuIsa isa = CpuIsa::kAuto;
};

// Working memory of a forward pass, allocated once for up to max_tokens token rows; each buffer
// starts a cache line, so that the threads' column ranges of a row never share one.
struct CpuActivations {
  CpuActivations(const ModelConfig& config, int64_t max_tokens, int n_threads,
                 int32_t kv_block_size);

  int64_t max_tokens;
  CacheAlignedVector<float> hidden;     // (max_tokens, n_embd) residual stream: input and output
  CacheAlignedVector<float> normed;     // (max_tokens, n_embd) norm output, also projection outputs
  CacheAlignedVector<float> q;          // (max_tokens, n_head * head_dim)
  CacheAlignedVector<float> k;          // (max_tokens, n_head_kv * head_dim)
  CacheAlignedVector<float> v;          // (max_tokens, n_head_kv * head_dim)
  CacheAlignedVector<float> attn;       // (max_tokens, n_head * head_dim)
  CacheAlignedVector<float> gate;       // (max_tokens, n_ff), then silu(gate) * up
  CacheAlignedVector<float> up;         // (max_tokens, n_ff)
  CacheAlignedVector<float> rope_cos;   // (max_tokens, rope_dim / 2)
  CacheAlignedVector<float> rope_sin;   // (max_tokens, rope_dim / 2)
  CacheAlignedVector<float> head_rows;  // (max_tokens, n_embd) final-normed rows that need logits
  ActCache act;
  AttentionScratch attention_scratch;
};

class CpuBackend {
 public:
  // Checks that every weight has a CPU kernel and packs the Q4_0 / Q4_1 matrices (a copy of
  // their bytes that the matrix products read instead of the file's; not with
  // reference_kernels); `pool` must outlive the backend.
  static Result<std::unique_ptr<CpuBackend>> create(std::shared_ptr<const LoadedModel> model,
                                                    ThreadPool* pool,
                                                    const CpuBackendOptions& options);

  const ModelConfig& config() const { return model_->config; }
  ThreadPool& pool() const { return *pool_; }
  // The instruction set of the matrix products, resolved once at creation (unused with
  // reference_kernels).
  KernelIsa kernel_isa() const { return kernel_isa_; }
  // Bytes of the packed weight copies.
  size_t packed_bytes() const;

  // Runs `range` over `batch`. With range.embeddings the token embeddings are the input,
  // otherwise act.hidden must hold the input rows (n_tokens × n_embd); act.hidden holds the
  // output rows afterwards. With range.head, logits of batch.logit_rows are written to
  // `logits` ((logit_rows.size(), n_vocab) row-major); when `hidden` is not empty, the
  // final-normed rows of batch.logit_rows go there instead ((logit_rows.size(), n_embd)) and
  // no logits are computed (`logits` may then be empty).
  // PRECONDITIONS: the batch passed validate_batch against cache.info(); n_tokens <=
  // act.max_tokens; the cache holds the range's layers.
  Status forward(const Batch& batch, const LayerRange& range, CpuKvCache& cache,
                 CpuActivations& act, std::span<float> logits, std::span<float> hidden = {}) const;

 private:
  CpuBackend(std::shared_ptr<const LoadedModel> model, ThreadPool* pool,
             const CpuBackendOptions& options);

  void run_layer(const Batch& batch, int32_t layer, CpuKvCache& cache, CpuActivations& act) const;
  void project(std::span<const MatmulOutput> outputs, const float* x, int64_t n_tokens,
               int64_t cols, CpuActivations& act) const;
  void rmsnorm_rows(const float* x, const float* weight, float* y, int64_t n_rows) const;
  // fn(begin, end) over ranges of [0, n_rows) token rows, split over the pool where there are
  // enough rows for it (a decode step's few run inline on the calling thread).
  void for_rows(int64_t n_rows, const std::function<void(int64_t begin, int64_t end)>& fn) const;

  std::shared_ptr<const LoadedModel> model_;
  ThreadPool* pool_;
  CpuBackendOptions options_;
  KernelIsa kernel_isa_;
  std::vector<float> inv_freq_;  // (rope_dim / 2)
  std::unordered_map<const QTensor*, PackedWeight> packed_;
  AttentionShape attention_shape_;
};

}  // namespace llamaserve::cpu
