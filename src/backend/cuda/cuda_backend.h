// The CUDA Backend: runs a LayerRange of a LLaMA-family model over a staged Batch on one
// device, every step a kernel on one stream (so the whole pass can be captured as a CUDA
// graph). Mirrors cpu::CpuBackend; executors (src/parallel) own the state it runs on.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_state.h"
#include "backend/cuda/cuda_weights.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/launch.h"
#include "backend/cuda/norm.h"
#include "backend/cuda/op_timer.h"
#include "backend/cuda/peer_all_reduce.h"
#include "backend/cuda/rank_sum.h"
#include "backend/kernel_tuning.h"
#include "backend/layer_range.h"
#include "core/status.h"
#include "model/weights.h"

namespace llamaserve::cuda {

struct CudaBackendOptions {
  // Products with at least this many activation rows are GEMMs (gemm.h: cuBLAS, or for
  // quantized weights of up to kDefaultQuantMmaRows rows quant_mma.h's kernel); fewer use matvec.
  // Quantized weights and float weights have their own thresholds: from 5 rows on both lose
  // as matvecs (Q4_K_M 7B at 6 rows 7.3 ms a step as 8-bit matvecs, 4.6 on quant_mma; Q8_0 at
  // 4 rows 4.3 against 5.5, bench/results/2026-12-01-h200-quant-mma.md).
  int32_t gemm_min_rows = 5;
  int32_t float_gemm_min_rows = 5;
  // Tensor parallelism: the weights are one rank's shard (heads and FFN columns), and the
  // partial results of the attention output and FFN down projections are summed over the
  // ranks as this strategy says (rank_sum.h). Null: one GPU (OneRankSum).
  std::shared_ptr<const RankSum> rank_sum;
  // When set, an event after each operation (op_timer.h); eager passes only.
  OpTimer* op_timer = nullptr;
  // The kernels' settings: whether launches use programmatic dependent launch (tuning.pdl,
  // passed to every launcher in its LaunchStream).
  KernelTuning tuning;
};

class CudaBackend {
 public:
  // `weights` were uploaded for `range`; `cublas` is the caller's handle (one per device and
  // stream), configured with a workspace.
  CudaBackend(const ModelConfig& config, CudaWeights weights, cublasHandle_t cublas,
              const CudaBackendOptions& options);

  const CudaWeights& weights() const { return weights_; }

  // Runs `range` over `batch`: embeddings (with range.embeddings; else act.hidden holds the
  // input rows), then every layer, leaving the output rows in act.hidden.
  // PRECONDITIONS: batch.n_tokens <= the activations' max_tokens; the cache holds the range's
  // layers; n_splits * batch.n_tokens and batch.max_row_splits * batch.n_tokens <= the
  // activations' max_split_rows. n_splits: the attention's launch-wide splits (of the tiles
  // after a batch's split tiles, if any).
  Status forward(const DeviceBatch& batch, const LayerRange& range, const CudaKvCache& kv,
                 CudaActivations& act, int32_t n_splits, cudaStream_t stream) const;

  // The pieces of forward(), for executors that interleave several row ranges of one pass
  // (tensor-parallel prompts overlapping one range's all-reduce with another's products):
  // the embeddings of the batch's tokens into act.hidden; a layer's attention block (norm,
  // Q/K/V, RoPE and KV write, attention, output projection added to act.hidden) and its FFN
  // block (norm, gate/up, SwiGLU, down projection added to act.hidden).
  Status embed(const DeviceBatch& batch, CudaActivations& act, cudaStream_t stream) const;
  // `pending` (forward()'s own use): when given, the block starts by completing what *pending
  // says act.hidden lacks, and its output projection may leave its sum over the ranks pending
  // (RankSum::project). Without it, the output projection is added to act.hidden and the caller
  // sums act.hidden over the ranks (RankSum::sum_hidden).
  Status attention_block(const DeviceBatch& batch, int32_t layer, const CudaKvCache& kv,
                         CudaActivations& act, int32_t n_splits, cudaStream_t stream,
                         PendingSum* pending = nullptr) const;
  Status ffn_block(const DeviceBatch& batch, int32_t layer, const CudaKvCache& kv,
                   CudaActivations& act, cudaStream_t stream, PendingSum* pending = nullptr) const;

  // Final norm and output projection of logit rows [first, first + count) of the batch into
  // act.logits (row stride act.vocab_stride). PRECONDITION: count <= max_logit_rows.
  Status head(const DeviceBatch& batch, int32_t first, int32_t count, CudaActivations& act,
              cudaStream_t stream) const;
  // The final norm alone of logit rows [first, first + count) into act.head_rows (row stride
  // act.embd_stride): the hidden states embeddings are pooled from.
  // PRECONDITION: count <= max_logit_rows.
  Status final_norm(const DeviceBatch& batch, int32_t first, int32_t count, CudaActivations& act,
                    cudaStream_t stream) const;

 private:
  // The output norm of logit rows [first, first + count) of `batch` into act.head_rows.
  RmsNormArgs output_norm_args(const DeviceBatch& batch, int32_t first, int32_t count,
                               const CudaActivations& act) const;
  // `stream` with this backend's PDL setting, for the launchers.
  LaunchStream on(cudaStream_t stream) const { return {stream, options_.tuning.pdl}; }
  // Closes the interval of `label` when op timing is on.
  Status timed(const char* label, cudaStream_t stream) const {
    return options_.op_timer != nullptr ? options_.op_timer->mark(label, stream) : Status::ok();
  }
  // One product y (+)= W x (+ bias) of a layer.
  struct Projection {
    const DeviceMatrix* w;
    float* y;
    int64_t y_stride;
    const float* bias;
    bool accumulate;
    const PeerReduceView* reduce = nullptr;  // a fused reduction's partial (matvec.h)
  };
  // Whether GEMM projection b can run in one GEMM with a, the one before it (see project).
  static bool continues_gemm(const Projection& a, const Projection& b);
  // Whether a product of n_rows rows with `w` runs as a cuBLAS GEMM (else a matvec).
  bool uses_gemm(int64_t n_rows, const DeviceMatrix& w) const;
  // True when products of n_rows rows with any of `weights` run as integer matvecs and so need
  // the input as 8-bit blocks in act.q8.
  bool wants_q8(int64_t n_rows, std::initializer_list<const DeviceMatrix*> weights) const;
  // The projections of one input x (n_rows rows): cuBLAS GEMMs where uses_gemm, else
  // matvecs, consecutive ones of one weight type in one launch, consecutive GEMMs whose weights
  // and outputs continue each other (continues_gemm) in one GEMM. x_q8_ready: act.q8 already holds
  // x as 8-bit blocks (written by the producer of x); otherwise it is quantized here if needed.
  // x_half: act.gemm.act_half already holds x as these halves (its producer wrote them).
  Status project(std::initializer_list<Projection> projections, const float* x, int64_t x_stride,
                 int64_t n_rows, bool x_q8_ready, CudaActivations& act, LaunchStream stream,
                 std::optional<HalfType> x_half = {}) const;
  // The half type in which every one of `weights` takes a GEMM input of n_rows rows, when each
  // runs as a GEMM (and all take one type): the producer of that input can then write it for
  // the GEMMs itself (gemm_act_half_stride), in place of its fp32 rows.
  std::optional<HalfType> gemm_input(int64_t n_rows,
                                     std::initializer_list<const DeviceMatrix*> weights) const;

  // The output projection of a block (w, one of `layer`'s), act.hidden (+)= w x over n_rows
  // rows, run and summed over the ranks by the RankSum (`pending` as for attention_block);
  // `label` times the product.
  class BlockOutput;
  Status output_projection(const CudaLayerWeights& layer, const DeviceMatrix& w, const float* x,
                           int64_t x_stride, int64_t n_rows, bool x_q8_ready, CudaActivations& act,
                           LaunchStream stream, PendingSum* pending, const char* label,
                           std::optional<HalfType> x_half = {}) const;
  // n_rows rows of act as the RankSum's calls take them.
  SumRows sum_rows(int64_t n_rows, CudaActivations& act, LaunchStream stream) const;
  // act.normed = rmsnorm(act.hidden) with `weight` over n_rows rows, also as 8-bit blocks in
  // act.q8 when `q8` (the next products run as integer matvecs). With *pending, first adds
  // what act.hidden lacks (RankSum::consume, which clears it).
  // With `half`, the normalized rows go as those halves to half_rows instead (null:
  // act.gemm.act_half), row stride gemm_act_half_stride(n_embd).
  Status norm_hidden(const float* weight, int64_t n_rows, bool q8, CudaActivations& act,
                     LaunchStream stream, PendingSum* pending = nullptr,
                     std::optional<HalfType> half = {}, void* half_rows = nullptr) const;

  ModelConfig config_;
  CudaWeights weights_;
  cublasHandle_t cublas_;
  CudaBackendOptions options_;
  std::shared_ptr<const RankSum> rank_sum_;  // options_.rank_sum, or OneRankSum
};

}  // namespace llamaserve::cuda
