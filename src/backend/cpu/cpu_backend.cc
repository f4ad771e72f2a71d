#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cassert>
#include <cmath>

#include "backend/cpu/ops.h"
#include "backend/cpu/ref_kernels.h"
#include "backend/cpu/rope.h"
#include "quant/quant.h"

namespace llamaserve::cpu {
namespace {

size_t rows_of(int64_t max_tokens, int64_t cols) { return static_cast<size_t>(max_tokens * cols); }

}  // namespace

CpuActivations::CpuActivations(const ModelConfig& c, int64_t max_tokens_in, int n_threads,
                               int32_t kv_block_size)
    : max_tokens(max_tokens_in),
      hidden(rows_of(max_tokens_in, c.n_embd)),
      normed(rows_of(max_tokens_in, c.n_embd)),
      q(rows_of(max_tokens_in, c.q_dim())),
      k(rows_of(max_tokens_in, c.kv_dim())),
      v(rows_of(max_tokens_in, c.kv_dim())),
      attn(rows_of(max_tokens_in, c.q_dim())),
      gate(rows_of(max_tokens_in, c.n_ff)),
      up(rows_of(max_tokens_in, c.n_ff)),
      rope_cos(rows_of(max_tokens_in, c.rope_dim / 2)),
      rope_sin(rows_of(max_tokens_in, c.rope_dim / 2)),
      head_rows(rows_of(max_tokens_in, c.n_embd)),
      act(max_tokens_in, std::max({c.n_embd, c.q_dim(), c.n_ff})),
      attention_scratch({c.n_head, c.n_head_kv, c.head_dim, 0.0f}, kv_block_size, n_threads) {}

CpuBackend::CpuBackend(std::shared_ptr<const LoadedModel> model, ThreadPool* pool,
                       const CpuBackendOptions& options)
    : model_(std::move(model)),
      pool_(pool),
      options_(options),
      kernel_isa_(resolve_kernel_isa(options.isa)) {
  const ModelConfig& c = model_->config;
  const auto& freqs = model_->weights.rope_freqs;
  inv_freq_ = rope_inv_freq(c, freqs ? freqs->f32() : nullptr);
  attention_shape_ = {c.n_head, c.n_head_kv, c.head_dim,
                      1.0f / std::sqrt(static_cast<float>(c.head_dim))};
}

Result<std::unique_ptr<CpuBackend>> CpuBackend::create(std::shared_ptr<const LoadedModel> model,
                                                       ThreadPool* pool,
                                                       const CpuBackendOptions& options) {
  const ModelWeights& w = model->weights;
  LS_RETURN_IF_ERROR(check_matmul_supported(w.output));
  LS_RETURN_IF_ERROR(check_row(w.token_embd.type, w.token_embd.cols()));
  for (const LayerWeights& l : w.layers) {
    for (const QTensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      LS_RETURN_IF_ERROR(check_matmul_supported(*t));
    }
  }
  std::unique_ptr<CpuBackend> backend(new CpuBackend(std::move(model), pool, options));
  if (!options.reference_kernels) {
    auto pack = [&](const QTensor& t) -> Status {
      if (!PackedWeight::packs(t.type) || backend->packed_.contains(&t)) return Status::ok();
      LS_ASSIGN_OR_RETURN(PackedWeight packed, PackedWeight::pack(t, *pool));
      backend->packed_.emplace(&t, std::move(packed));
      return Status::ok();
    };
    LS_RETURN_IF_ERROR(pack(w.output));
    for (const LayerWeights& l : w.layers) {
      for (const QTensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
        LS_RETURN_IF_ERROR(pack(*t));
      }
    }
  }
  return backend;
}

size_t CpuBackend::packed_bytes() const {
  size_t bytes = 0;
  for (const auto& [tensor, packed] : packed_) bytes += packed.bytes();
  return bytes;
}

void CpuBackend::for_rows(int64_t n_rows,
                          const std::function<void(int64_t begin, int64_t end)>& fn) const {
  constexpr size_t kMinRowsPerPart = 16;
  pool_->parallel_for(static_cast<size_t>(n_rows), kMinRowsPerPart, [&](size_t begin, size_t end) {
    fn(static_cast<int64_t>(begin), static_cast<int64_t>(end));
  });
}

void CpuBackend::rmsnorm_rows(const float* x, const float* weight, float* y, int64_t n_rows) const {
  const int64_t n = model_->config.n_embd;
  const float eps = model_->config.norm_eps;
  const bool reference = options_.reference_kernels;
  for_rows(n_rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      if (reference) {
        ref::rmsnorm(x + r * n, weight, y + r * n, n, eps);
      } else {
        rmsnorm(x + r * n, weight, y + r * n, n, eps);
      }
    }
  });
}

void CpuBackend::project(std::span<const MatmulOutput> outputs, const float* x, int64_t n_tokens,
                         int64_t cols, CpuActivations& act) const {
  if (options_.reference_kernels) {
    for (const MatmulOutput& out : outputs) matmul_ref(out, x, n_tokens, pool_);
    return;
  }
  act.act.reset(x, n_tokens, cols);
  constexpr size_t kMaxOutputs = 3;  // Q/K/V
  assert(outputs.size() <= kMaxOutputs);
  MatmulOutput with_packed[kMaxOutputs];
  const size_t n = std::min(outputs.size(), kMaxOutputs);
  for (size_t i = 0; i < n; ++i) {
    with_packed[i] = outputs[i];
    const auto it = packed_.find(outputs[i].weight);
    if (it != packed_.end()) with_packed[i].packed = &it->second;
  }
  matmul(std::span<const MatmulOutput>(with_packed, n), act.act, *pool_, kernel_isa_);
}

void CpuBackend::run_layer(const Batch& batch, int32_t layer, CpuKvCache& cache,
                           CpuActivations& act) const {
  const ModelConfig& c = model_->config;
  const LayerWeights& w = model_->weights.layers[static_cast<size_t>(layer)];
  const int64_t n = batch.n_tokens();
  const bool reference = options_.reference_kernels;
  // The residual stream's rows += delta's (both n_embd wide). The elementwise steps go row by
  // row, so that a row's bits never depend on the rows beside it.
  auto add_rows = [&](float* rows, const float* delta) {
    for_rows(n, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        add_inplace(rows + t * c.n_embd, delta + t * c.n_embd, c.n_embd);
      }
    });
  };

  // Attention block: hidden += wo · attention(rope(wq · norm(hidden)), ...)
  rmsnorm_rows(act.hidden.data(), w.attn_norm.f32(), act.normed.data(), n);
  const MatmulOutput qkv[] = {
      {&w.wq, act.q.data(), c.q_dim(), w.bq ? w.bq->f32() : nullptr},
      {&w.wk, act.k.data(), c.kv_dim(), w.bk ? w.bk->f32() : nullptr},
      {&w.wv, act.v.data(), c.kv_dim(), w.bv ? w.bv->f32() : nullptr},
  };
  project(qkv, act.normed.data(), n, c.n_embd, act);
  const int64_t n_pairs = c.rope_dim / 2;
  for_rows(n, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* cos = act.rope_cos.data() + t * n_pairs;
      const float* sin = act.rope_sin.data() + t * n_pairs;
      rope_apply(act.q.data() + t * c.q_dim(), c.n_head, c.head_dim, c.rope_dim, c.rope_ordering,
                 cos, sin);
      rope_apply(act.k.data() + t * c.kv_dim(), c.n_head_kv, c.head_dim, c.rope_dim,
                 c.rope_ordering, cos, sin);
    }
    cache.write_tokens(batch, layer, act.k.data(), act.v.data(), static_cast<int32_t>(begin),
                       static_cast<int32_t>(end));
  });
  if (reference) {
    attention_ref(batch, attention_shape_, act.q.data(), cache, layer, act.attn.data());
  } else {
    attention(batch, attention_shape_, act.q.data(), cache, layer, act.attn.data(), *pool_,
              act.attention_scratch, kernel_isa_);
  }
  const MatmulOutput wo[] = {{&w.wo, act.normed.data(), c.n_embd}};
  project(wo, act.attn.data(), n, c.q_dim(), act);
  add_rows(act.hidden.data(), act.normed.data());

  // Feed-forward block: hidden += w_down · (silu(w_gate · x) * (w_up · x)), x = norm(hidden)
  rmsnorm_rows(act.hidden.data(), w.ffn_norm.f32(), act.normed.data(), n);
  const MatmulOutput gate_up[] = {
      {&w.w_gate, act.gate.data(), c.n_ff},
      {&w.w_up, act.up.data(), c.n_ff},
  };
  project(gate_up, act.normed.data(), n, c.n_embd, act);
  for_rows(n, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* gate = act.gate.data() + t * c.n_ff;
      const float* up = act.up.data() + t * c.n_ff;
      if (reference) {
        ref::silu_mul(gate, up, gate, c.n_ff);
      } else {
        silu_mul(gate, up, gate, c.n_ff);
      }
    }
  });
  const MatmulOutput down[] = {{&w.w_down, act.normed.data(), c.n_embd}};
  project(down, act.gate.data(), n, c.n_ff, act);
  add_rows(act.hidden.data(), act.normed.data());
}

Status CpuBackend::forward(const Batch& batch, const LayerRange& range, CpuKvCache& cache,
                           CpuActivations& act, std::span<float> logits,
                           std::span<float> hidden) const {
  const ModelConfig& c = model_->config;
  const ModelWeights& w = model_->weights;
  const int64_t n = batch.n_tokens();
  if (n > act.max_tokens) {
    return make_error(StatusCode::kInvalidArgument,
                      "batch of {} tokens exceeds the activations' {} rows", n, act.max_tokens);
  }
  if (range.begin < 0 || range.end > c.n_layer || range.begin > range.end) {
    return make_error(StatusCode::kInvalidArgument,
                      "layer range [{}, {}) is outside the model's {} layers", range.begin,
                      range.end, c.n_layer);
  }
  const KvCacheGeometry& g = cache.geometry();
  if (range.begin < g.first_layer || range.end > g.first_layer + g.n_layers) {
    return make_error(StatusCode::kInvalidArgument,
                      "KV cache holds layers [{}, {}), range needs [{}, {})", g.first_layer,
                      g.first_layer + g.n_layers, range.begin, range.end);
  }
  const bool wants_hidden = !hidden.empty();
  if (wants_hidden && hidden.size() < batch.logit_rows.size() * static_cast<size_t>(c.n_embd)) {
    return make_error(StatusCode::kInvalidArgument,
                      "hidden-state buffer holds {} floats, {} rows of {} needed", hidden.size(),
                      batch.logit_rows.size(), c.n_embd);
  }
  if (range.head && !wants_hidden &&
      logits.size() < batch.logit_rows.size() * static_cast<size_t>(c.n_vocab)) {
    return make_error(StatusCode::kInvalidArgument,
                      "logits buffer holds {} floats, {} rows of {} needed", logits.size(),
                      batch.logit_rows.size(), c.n_vocab);
  }

  if (range.embeddings) {
    for (int64_t t = 0; t < n; ++t) {
      LS_RETURN_IF_ERROR(dequantize_row(w.token_embd.type, w.token_embd.row(batch.tokens[t]),
                                        act.hidden.data() + t * c.n_embd, c.n_embd));
    }
  }
  rope_cos_sin(inv_freq_, batch.positions.data(), n, act.rope_cos.data(), act.rope_sin.data());
  for (int32_t layer = range.begin; layer < range.end; ++layer) run_layer(batch, layer, cache, act);

  if (range.head && !batch.logit_rows.empty()) {
    const int64_t n_rows = static_cast<int64_t>(batch.logit_rows.size());
    for (int64_t i = 0; i < n_rows; ++i) {
      const float* row = act.hidden.data() + static_cast<int64_t>(batch.logit_rows[i]) * c.n_embd;
      std::copy(row, row + c.n_embd, act.head_rows.data() + i * c.n_embd);
    }
    rmsnorm_rows(act.head_rows.data(), w.output_norm.f32(), act.head_rows.data(), n_rows);
    if (wants_hidden) {
      std::copy_n(act.head_rows.data(), n_rows * c.n_embd, hidden.data());
      return Status::ok();
    }
    const MatmulOutput head[] = {{&w.output, logits.data(), c.n_vocab}};
    project(head, act.head_rows.data(), n_rows, c.n_embd, act);
  }
  return Status::ok();
}

}  // namespace llamaserve::cpu
