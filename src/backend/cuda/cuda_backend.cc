#include "backend/cuda/cuda_backend.h"

#include <cmath>
#include <optional>
#include <span>

#include "backend/cuda/act_quant.h"
#include "backend/cuda/attention.h"
#include "backend/cuda/dequant.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/matvec.h"
#include "backend/cuda/norm.h"
#include "backend/cuda/rope.h"

namespace llamaserve::cuda {
// Whether GEMM projection b can join a's: weights of one type whose rows follow a's in memory
// (upload_weights allocates a layer's Q, K, V and gate, up back to back), and outputs whose
// columns follow a's (CudaActivations lays them out side by side). That takes weights without
// a separate scale array: the halves cuBLAS multiplies in place, and the K-quants whose blocks
// carry their scales (Q4_K, Q5_K), which quant_mma then reads as one matrix: one launch
// instead of one a matrix, whose first and last waves leave SMs idle.
bool CudaBackend::continues_gemm(const Projection& a, const Projection& b) {
  const DeviceMatrix& wa = *a.w;
  const DeviceMatrix& wb = *b.w;
  const bool joinable = wa.type == TensorType::F16 || wa.type == TensorType::BF16 ||
                        wa.type == TensorType::Q4_K || wa.type == TensorType::Q5_K;
  return joinable && wa.scales == nullptr && wb.scales == nullptr && wb.type == wa.type &&
         wb.cols == wa.cols && wb.quant_row_bytes == wa.quant_row_bytes &&
         wb.quants == wa.quants + wa.rows * wa.quant_row_bytes && b.y == a.y + wa.rows &&
         b.y_stride == a.y_stride && b.accumulate == a.accumulate && a.reduce == nullptr &&
         b.reduce == nullptr;
}

CudaBackend::CudaBackend(const ModelConfig& config, CudaWeights weights, cublasHandle_t cublas,
                         const CudaBackendOptions& options)
    : config_(config),
      weights_(std::move(weights)),
      cublas_(cublas),
      options_(options),
      rank_sum_(options.rank_sum ? options.rank_sum : std::make_shared<const OneRankSum>()) {}

bool CudaBackend::uses_gemm(int64_t n_rows, const DeviceMatrix& w) const {
  return n_rows >= (matvec_uses_q8(w.type) ? options_.gemm_min_rows : options_.float_gemm_min_rows);
}

bool CudaBackend::wants_q8(int64_t n_rows,
                           std::initializer_list<const DeviceMatrix*> weights) const {
  for (const DeviceMatrix* w : weights) {
    if (matvec_uses_q8(w->type) && !uses_gemm(n_rows, *w)) return true;
  }
  return false;
}

std::optional<HalfType> CudaBackend::gemm_input(
    int64_t n_rows, std::initializer_list<const DeviceMatrix*> weights) const {
  std::optional<HalfType> type;
  for (const DeviceMatrix* w : weights) {
    if (!uses_gemm(n_rows, *w)) return std::nullopt;
    const HalfType t = w->type == TensorType::BF16 ? HalfType::kBF16 : HalfType::kF16;
    if (type && *type != t) return std::nullopt;
    type = t;
  }
  return type;
}

Status CudaBackend::project(std::initializer_list<Projection> projections, const float* x,
                            int64_t x_stride, int64_t n_rows, bool x_q8_ready, CudaActivations& act,
                            LaunchStream stream, std::optional<HalfType> x_half) const {
  const int64_t cols = projections.begin()->w->cols;
  bool q8_ready = x_q8_ready;
  // The half-precision type x was last converted to for a GEMM of this input (QKV and
  // gate/up share one conversion).
  std::optional<bool> half_is_bf16;
  if (x_half) half_is_bf16 = *x_half == HalfType::kBF16;
  MatvecArgs parts[kMaxMatvecParts];
  size_t n_parts = 0;
  auto flush = [&]() -> Status {
    if (n_parts == 0) return Status::ok();
    const Status s = matvec_parts(std::span<const MatvecArgs>(parts, n_parts), stream);
    n_parts = 0;
    return s;
  };
  const std::span<const Projection> all(projections.begin(), projections.size());
  for (size_t i = 0; i < all.size(); ++i) {
    const Projection& p = all[i];
    if (p.w->cols != cols) {
      return make_error(StatusCode::kInternal, "projections of one input differ in width");
    }
    if (uses_gemm(n_rows, *p.w)) {
      if (p.reduce != nullptr) {
        return make_error(StatusCode::kInternal, "a fused reduction's partial from a GEMM");
      }
      LS_RETURN_IF_ERROR(flush());
      // The projections that continue this one (weights and outputs) join its GEMM.
      size_t last = i;
      GemmArgs g;
      g.w = *p.w;
      while (last + 1 < all.size() && continues_gemm(all[last], all[last + 1])) {
        g.w.rows += all[++last].w->rows;
      }
      g.x = x;
      g.x_stride = x_stride;
      g.n_rows = n_rows;
      g.y = p.y;
      g.y_stride = p.y_stride;
      g.bias = last == i ? p.bias : nullptr;
      g.accumulate = p.accumulate;
      const bool bf16 = p.w->type == TensorType::BF16;
      g.x_half_ready = half_is_bf16 == bf16;
      half_is_bf16 = bf16;
      LS_RETURN_IF_ERROR(gemm(cublas_, g, act.gemm, stream));
      for (size_t j = i; last > i && j <= last; ++j) {
        if (all[j].bias == nullptr) continue;
        LS_RETURN_IF_ERROR(
            add_bias(all[j].y, all[j].y_stride, all[j].bias, n_rows, all[j].w->rows, stream));
      }
      i = last;
      continue;
    }
    const bool q8 = matvec_uses_q8(p.w->type);
    if (q8 && !q8_ready) {
      LS_RETURN_IF_ERROR(quantize_q8(x, x_stride, n_rows, cols, act.q8, stream));
      q8_ready = true;
    }
    // One launch per run of projections of one type (and the same accumulate mode).
    if (n_parts > 0 && (parts[0].w.type != p.w->type || parts[0].accumulate != p.accumulate ||
                        n_parts == static_cast<size_t>(kMaxMatvecParts))) {
      LS_RETURN_IF_ERROR(flush());
    }
    MatvecArgs& a = parts[n_parts++];
    a = MatvecArgs{};
    a.w = *p.w;
    a.x = x;
    a.x_stride = x_stride;
    if (q8) a.xq = act.q8;
    a.n_rows = static_cast<int32_t>(n_rows);
    a.y = p.y;
    a.y_stride = p.y_stride;
    a.bias = p.bias;
    a.accumulate = p.accumulate;
    a.reduce = p.reduce;
    if (p.reduce != nullptr) LS_RETURN_IF_ERROR(flush());  // alone in its launch
  }
  return flush();
}

// One block's output projection, in the forms RankSum::project may run it in.
class CudaBackend::BlockOutput final : public OutputProjection {
 public:
  BlockOutput(const CudaBackend& backend, const CudaLayerWeights& layer, const DeviceMatrix& w,
              const float* x, int64_t x_stride, int64_t n_rows, bool x_q8_ready,
              CudaActivations& act, LaunchStream stream, const char* label,
              std::optional<HalfType> x_half)
      : backend_(backend),
        layer_(layer),
        w_(w),
        x_(x),
        x_stride_(x_stride),
        n_rows_(n_rows),
        x_q8_ready_(x_q8_ready),
        act_(act),
        stream_(stream),
        label_(label),
        x_half_(x_half) {}

  const DeviceMatrix& weights() const override { return w_; }
  const CudaLayerWeights& layer() const override { return layer_; }
  bool uses_gemm(const DeviceMatrix& w) const override { return backend_.uses_gemm(n_rows_, w); }
  Status into_hidden(bool accumulate, const PeerReduceView* reduce) const override {
    return backend_.project({{&w_, act_.hidden, act_.embd_stride, nullptr, accumulate, reduce}}, x_,
                            x_stride_, n_rows_, x_q8_ready_, act_, stream_, x_half_);
  }
  Status gemm_partial(float* y, void* y_half) const override {
    GemmArgs g;
    g.w = w_;
    g.x = x_;
    g.x_stride = x_stride_;
    g.n_rows = n_rows_;
    g.x_half_ready = x_half_.has_value();
    g.y = y;
    g.y_half = y_half;
    g.y_stride = act_.embd_stride;
    return gemm(backend_.cublas_, g, act_.gemm, stream_);
  }
  Status timed() const override { return backend_.timed(label_, stream_); }

 private:
  const CudaBackend& backend_;
  const CudaLayerWeights& layer_;
  const DeviceMatrix& w_;
  const float* x_;
  int64_t x_stride_;
  int64_t n_rows_;
  bool x_q8_ready_;
  CudaActivations& act_;
  LaunchStream stream_;
  const char* label_;
  std::optional<HalfType> x_half_;
};

Status CudaBackend::output_projection(const CudaLayerWeights& layer, const DeviceMatrix& w,
                                      const float* x, int64_t x_stride, int64_t n_rows,
                                      bool x_q8_ready, CudaActivations& act, LaunchStream stream,
                                      PendingSum* pending, const char* label,
                                      std::optional<HalfType> x_half) const {
  const BlockOutput out(*this, layer, w, x, x_stride, n_rows, x_q8_ready, act, stream, label,
                        x_half);
  return rank_sum_->project(out, pending, sum_rows(n_rows, act, stream));
}

SumRows CudaBackend::sum_rows(int64_t n_rows, CudaActivations& act, LaunchStream stream) const {
  SumRows rows;
  rows.hidden = act.hidden;
  rows.half = act.sum_half;
  rows.stride = act.embd_stride;
  rows.n_rows = n_rows;
  rows.n = config_.n_embd;
  rows.stream = stream;
  rows.op_timer = options_.op_timer;
  return rows;
}

Status CudaBackend::attention_block(const DeviceBatch& b, int32_t layer, const CudaKvCache& kv,
                                    CudaActivations& act, int32_t n_splits,
                                    cudaStream_t cuda_stream, PendingSum* pending) const {
  const LaunchStream stream = on(cuda_stream);
  const ModelConfig& c = config_;
  const CudaLayerWeights& w = weights_.layers[static_cast<size_t>(layer - kv.first_layer)];
  const int64_t n = b.n_tokens;

  // Attention block: hidden += wo · attention(rope(wq · norm(hidden)), ...)
  const bool qkv_q8 = wants_q8(n, {&w.wq, &w.wk, &w.wv});
  const std::optional<HalfType> qkv_half = gemm_input(n, {&w.wq, &w.wk, &w.wv});
  LS_RETURN_IF_ERROR(norm_hidden(w.attn_norm, n, qkv_q8, act, stream, pending, qkv_half));
  LS_RETURN_IF_ERROR(project({{&w.wq, act.q, act.q_stride, w.bq, false},
                              {&w.wk, act.k, act.kv_stride, w.bk, false},
                              {&w.wv, act.v, act.kv_stride, w.bv, false}},
                             act.normed, act.embd_stride, n, qkv_q8, act, stream, qkv_half));
  LS_RETURN_IF_ERROR(timed("norm+qkv", stream));

  RopeArgs rope_args;
  rope_args.q = act.q;
  rope_args.q_stride = act.q_stride;
  rope_args.k = act.k;
  rope_args.k_stride = act.kv_stride;
  rope_args.positions = b.positions;
  rope_args.inv_freq = weights_.inv_freq;
  rope_args.n_rows = n;
  rope_args.n_head = static_cast<int32_t>(c.n_head);
  rope_args.n_head_kv = static_cast<int32_t>(c.n_head_kv);
  rope_args.head_dim = static_cast<int32_t>(c.head_dim);
  rope_args.rope_dim = static_cast<int32_t>(c.rope_dim);
  rope_args.ordering = c.rope_ordering;

  KvWriteArgs write;
  write.k = act.k;
  write.k_stride = act.kv_stride;
  write.v = act.v;
  write.v_stride = act.kv_stride;
  write.type = kv.type;
  write.k_cache = kv.k_layer(layer);
  write.v_cache = kv.v_layer(layer);
  write.k_scales = kv.k_scales(layer);
  write.v_scales = kv.v_scales(layer);
  write.positions = b.positions;
  write.seq_index = b.seq_index;
  write.block_tables = b.block_tables;
  write.blocks_per_seq = b.blocks_per_seq;
  write.block_size = kv.block_size;
  write.n_rows = n;
  write.kv_dim = c.kv_dim();
  LS_RETURN_IF_ERROR(rope_write_kv(rope_args, write, stream));
  LS_RETURN_IF_ERROR(timed("rope+kv", stream));

  AttentionArgs at;
  at.q = act.q;
  at.q_stride = act.q_stride;
  at.kv_type = kv.type;
  at.k_cache = kv.k_layer(layer);
  at.v_cache = kv.v_layer(layer);
  at.k_scales = kv.k_scales(layer);
  at.v_scales = kv.v_scales(layer);
  at.positions = b.positions;
  at.seq_index = b.seq_index;
  at.block_tables = b.block_tables;
  at.blocks_per_seq = b.blocks_per_seq;
  at.block_size = kv.block_size;
  at.tiles = b.tiles;
  at.n_tiles = b.n_tiles;
  at.max_tile_rows = b.max_tile_rows;
  at.single_row_tiles = b.leading_single_row_tiles;
  at.single_rows = b.leading_single_rows;
  at.earlier_kv_settled = b.one_row_per_sequence;
  at.n_head = static_cast<int32_t>(c.n_head);
  at.n_head_kv = static_cast<int32_t>(c.n_head_kv);
  at.head_dim = static_cast<int32_t>(c.head_dim);
  at.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  at.out = act.attn;
  at.out_stride = act.attn_stride;
  // Split tiles' partials have a stride of their own; the tiles after them take n_splits.
  at.n_splits = b.max_row_splits > 0 ? b.max_row_splits : n_splits;
  at.split_tiles = b.max_row_splits > 0;
  at.rest_splits = n_splits;
  at.partial = act.attention_partial;
  at.split_counters = act.attention_counters;
  at.n_batch_rows = n;
  const bool wo_q8 = wants_q8(n, {&w.wo});
  at.out_q = wo_q8 ? act.q8 : Q8Rows{};
  // A GEMM output projection reads the attention's rows as halves, written by attention itself.
  const std::optional<HalfType> wo_half = gemm_input(n, {&w.wo});
  if (wo_half) {
    at.out_half = HalfRows{act.gemm.act_half, gemm_act_half_stride(w.wo.cols), *wo_half};
  }
  LS_RETURN_IF_ERROR(attention(at, stream));
  LS_RETURN_IF_ERROR(timed("attention", stream));
  return output_projection(w, w.wo, act.attn, act.attn_stride, n, wo_q8, act, stream, pending,
                           "o-proj", wo_half);
}

Status CudaBackend::ffn_block(const DeviceBatch& b, int32_t layer, const CudaKvCache& kv,
                              CudaActivations& act, cudaStream_t cuda_stream,
                              PendingSum* pending) const {
  const LaunchStream stream = on(cuda_stream);
  const ModelConfig& c = config_;
  const CudaLayerWeights& w = weights_.layers[static_cast<size_t>(layer - kv.first_layer)];
  const int64_t n = b.n_tokens;

  // Feed-forward block: hidden += w_down · (silu(w_gate · x) * (w_up · x)), x = norm(hidden)
  const bool ffn_q8 = wants_q8(n, {&w.w_gate, &w.w_up});
  const std::optional<HalfType> ffn_half = gemm_input(n, {&w.w_gate, &w.w_up});
  const Projection gate{&w.w_gate, act.gate, act.ff_stride, nullptr, false};
  const Projection up{&w.w_up, act.up, act.ff_stride, nullptr, false};
  const bool down_q8 = wants_q8(n, {&w.w_down});
  // A GEMM down projection reads the SwiGLU's rows as halves, written by their producer.
  const std::optional<HalfType> down_half = gemm_input(n, {&w.w_down});
  const HalfRows down_input =
      down_half ? HalfRows{act.gemm.act_half, gemm_act_half_stride(c.n_ff), *down_half}
                : HalfRows{};
  // Gate and up in one GEMM that writes the SwiGLU's halves itself (gemm.h): they are the down
  // projection's input at the start of act.gemm.act_half, so the GEMM reads its own input as
  // halves after them (where the workspace has room for both).
  const size_t swiglu_bytes = gemm_act_half_bytes(n, c.n_ff);
  if (ffn_half && down_half && continues_gemm(gate, up) &&
      act.gemm.act_half_bytes >= swiglu_bytes + gemm_act_half_bytes(n, c.n_embd)) {
    GemmWorkspace ws = act.gemm;
    ws.act_half = static_cast<uint8_t*>(act.gemm.act_half) + swiglu_bytes;
    ws.act_half_bytes -= swiglu_bytes;
    LS_RETURN_IF_ERROR(
        norm_hidden(w.ffn_norm, n, ffn_q8, act, stream, pending, ffn_half, ws.act_half));
    GemmArgs g;
    g.w = w.w_gate;
    g.w.rows += w.w_up.rows;
    g.x = act.normed;
    g.x_stride = act.embd_stride;
    g.x_half_ready = true;
    g.n_rows = n;
    g.y = act.gate;
    g.y_stride = act.ff_stride;
    g.swiglu = down_input;
    LS_RETURN_IF_ERROR(gemm(cublas_, g, ws, stream));
    LS_RETURN_IF_ERROR(timed("norm+gate/up+silu", stream));
  } else {
    LS_RETURN_IF_ERROR(norm_hidden(w.ffn_norm, n, ffn_q8, act, stream, pending, ffn_half));
    LS_RETURN_IF_ERROR(
        project({gate, up}, act.normed, act.embd_stride, n, ffn_q8, act, stream, ffn_half));
    LS_RETURN_IF_ERROR(timed("norm+gate/up", stream));
    LS_RETURN_IF_ERROR(silu_mul(act.gate, act.ff_stride, act.up, act.ff_stride, n, c.n_ff,
                                down_half ? nullptr : act.gate, act.ff_stride, stream,
                                down_q8 ? act.q8 : Q8Rows{}, down_input));
    LS_RETURN_IF_ERROR(timed("silu", stream));
  }
  return output_projection(w, w.w_down, act.gate, act.ff_stride, n, down_q8, act, stream, pending,
                           "down", down_half);
}

Status CudaBackend::forward(const DeviceBatch& b, const LayerRange& range, const CudaKvCache& kv,
                            CudaActivations& act, int32_t n_splits,
                            cudaStream_t cuda_stream) const {
  const LaunchStream stream = on(cuda_stream);
  if (range.begin < kv.first_layer || range.end > kv.first_layer + kv.n_layers ||
      range.n_layers() != static_cast<int32_t>(weights_.layers.size())) {
    return make_error(StatusCode::kInvalidArgument,
                      "layer range [{}, {}) does not match the uploaded weights ({} layers) or the "
                      "KV cache (layers [{}, {}))",
                      range.begin, range.end, weights_.layers.size(), kv.first_layer,
                      kv.first_layer + kv.n_layers);
  }
  if (range.embeddings) LS_RETURN_IF_ERROR(embed(b, act, stream));
  PendingSum pending;
  for (int32_t layer = range.begin; layer < range.end; ++layer) {
    LS_RETURN_IF_ERROR(attention_block(b, layer, kv, act, n_splits, stream, &pending));
    LS_RETURN_IF_ERROR(ffn_block(b, layer, kv, act, stream, &pending));
  }
  // What the last block's sum over the ranks may still owe act.hidden.
  return rank_sum_->finish(pending, sum_rows(b.n_tokens, act, stream));
}

Status CudaBackend::norm_hidden(const float* weight, int64_t n_rows, bool q8, CudaActivations& act,
                                LaunchStream stream, PendingSum* pending,
                                std::optional<HalfType> half, void* half_rows) const {
  RmsNormArgs norm;
  norm.x = act.hidden;
  norm.x_stride = act.embd_stride;
  norm.weight = weight;
  norm.y = act.normed;
  norm.y_stride = act.embd_stride;
  norm.n_rows = n_rows;
  norm.n = config_.n_embd;
  norm.eps = config_.norm_eps;
  norm.yq = q8 ? act.q8 : Q8Rows{};
  if (half) {
    norm.y = nullptr;
    norm.y_half = HalfRows{half_rows != nullptr ? half_rows : act.gemm.act_half,
                           gemm_act_half_stride(config_.n_embd), *half};
  }
  if (pending != nullptr) {
    LS_RETURN_IF_ERROR(rank_sum_->consume(*pending, sum_rows(n_rows, act, stream), norm));
  }
  return rmsnorm(norm, stream);
}

Status CudaBackend::embed(const DeviceBatch& b, CudaActivations& act,
                          cudaStream_t cuda_stream) const {
  const LaunchStream stream = on(cuda_stream);
  DequantArgs embed;
  embed.w = weights_.token_embd;
  embed.row_ids = b.tokens;
  embed.n_rows = b.n_tokens;
  embed.out_type = DequantOut::kF32;
  embed.dst = act.hidden;
  embed.dst_stride = act.embd_stride;
  LS_RETURN_IF_ERROR(dequantize_rows(embed, stream));
  return timed("embed", stream);
}

RmsNormArgs CudaBackend::output_norm_args(const DeviceBatch& b, int32_t first, int32_t count,
                                          const CudaActivations& act) const {
  RmsNormArgs norm;
  norm.x = act.hidden;
  norm.x_stride = act.embd_stride;
  norm.row_ids = b.logit_rows + first;
  norm.weight = weights_.output_norm;
  norm.y = act.head_rows;
  norm.y_stride = act.embd_stride;
  norm.n_rows = count;
  norm.n = config_.n_embd;
  norm.eps = config_.norm_eps;
  return norm;
}

Status CudaBackend::head(const DeviceBatch& b, int32_t first, int32_t count, CudaActivations& act,
                         cudaStream_t cuda_stream) const {
  if (count <= 0) return Status::ok();
  const LaunchStream stream = on(cuda_stream);
  RmsNormArgs norm = output_norm_args(b, first, count, act);
  const bool q8 = wants_q8(count, {&weights_.output});
  norm.yq = q8 ? act.q8 : Q8Rows{};
  LS_RETURN_IF_ERROR(rmsnorm(norm, stream));
  LS_RETURN_IF_ERROR(project({{&weights_.output, act.logits, act.vocab_stride, nullptr, false}},
                             act.head_rows, act.embd_stride, count, q8, act, stream));
  return timed("head", stream);
}

Status CudaBackend::final_norm(const DeviceBatch& b, int32_t first, int32_t count,
                               CudaActivations& act, cudaStream_t cuda_stream) const {
  if (count <= 0) return Status::ok();
  const LaunchStream stream = on(cuda_stream);
  LS_RETURN_IF_ERROR(rmsnorm(output_norm_args(b, first, count, act), stream));
  return timed("final_norm", stream);
}

}  // namespace llamaserve::cuda
