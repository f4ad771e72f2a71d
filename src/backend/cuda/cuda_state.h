// Per-instance device state of the CUDA backend, all allocated once from the device pool:
// the paged KV cache, the activations of a forward pass, and the batch arrays (a pinned host
// buffer and its device copy). Sizes follow CudaLimits, which the memory plan also uses.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include <cuda_runtime_api.h>

#include "backend/batch.h"
#include "backend/cuda/act_quant.h"
#include "backend/cuda/attention.h"
#include "backend/cuda/device_pool.h"
#include "backend/cuda/gemm.h"
#include "core/status.h"
#include "model/config.h"

namespace llamaserve::cuda {

struct CudaLimits {
  int64_t max_tokens = 2048;       // rows per forward pass
  int64_t max_logit_rows = 256;    // rows of logits computed per head pass
  int32_t max_seqs = 256;          // sequences per forward pass
  int32_t max_blocks_per_seq = 0;  // ceil(max context / block_size)
  int64_t max_split_rows = 512;    // rows × splits of flash-decoding partials
  int64_t gemm_scratch_elems = 0;  // f16 elements of dequantized weight rows for GEMMs
  // Rows a pass multiplies by matvec (fewer than the GEMM threshold): the 8-bit activation
  // blocks of quantized weights are sized for this many. 0: none (every product a GEMM).
  int64_t max_matvec_rows = 0;
  // A tensor-parallel rank summing its GEMM partials in half precision
  // (RankSum::half_sums): CudaActivations::sum_half is allocated.
  bool half_sums = false;
};

// Activation rows are padded to 8 floats so that every kernel's 16-byte loads stay aligned.
inline int64_t padded_row(int64_t n) { return (n + 7) / 8 * 8; }

struct CudaActivations {
  float* hidden = nullptr;  // (max_tokens, n_embd) residual stream
  float* normed = nullptr;  // (max_tokens, n_embd) norm output
  // q, k and v are the columns of one (max_tokens, q_dim + 2 kv_dim) matrix (strides q_stride
  // = kv_stride), gate and up those of one (max_tokens, 2 n_ff) matrix (ff_stride).
  float* q = nullptr;          // (max_tokens, q_dim)
  float* k = nullptr;          // (max_tokens, kv_dim)
  float* v = nullptr;          // (max_tokens, kv_dim)
  float* attn = nullptr;       // (max_tokens, q_dim), stride attn_stride
  float* gate = nullptr;       // (max_tokens, n_ff), then silu(gate) * up
  float* up = nullptr;         // (max_tokens, n_ff)
  float* head_rows = nullptr;  // (max_logit_rows, n_embd) final-normed rows that need logits
  float* logits = nullptr;     // (max_logit_rows, n_vocab)
  // (max_tokens, n_embd) halves, row stride embd_stride, with CudaLimits::half_sums: the
  // partial, then the sum over the ranks, of an output projection.
  void* sum_half = nullptr;
  float* attention_partial = nullptr;
  unsigned int* attention_counters = nullptr;  // zeros between passes (AttentionArgs)
  // (max_matvec_rows, max(n_embd, q_dim, n_ff)) as 8-bit blocks: the input of the integer
  // matvec, written by the producer of each projection's input (norm, silu_mul, quantize).
  Q8Rows q8;
  GemmWorkspace gemm;
  int64_t embd_stride = 0, q_stride = 0, kv_stride = 0, attn_stride = 0, ff_stride = 0,
          vocab_stride = 0;

  static uint64_t bytes(const ModelConfig& config, const CudaLimits& limits);
  static Result<CudaActivations> allocate(DevicePool& pool, const ModelConfig& config,
                                          const CudaLimits& limits);

  // The same buffers from batch row `first_row` on (hidden, normed, q, k, v, attn, gate, up,
  // sum_half),
  // for running a range of a pass's rows by itself. The other buffers are shared: the q8 rows
  // (the range must run its products as GEMMs), the GEMM workspace, the attention partials and
  // the head's rows, so ranges that use them run one after the other on one stream.
  CudaActivations rows_from(int64_t first_row) const;
};

// K and V of layers [first_layer, first_layer + n_layers), each one array: f16 values
// [n_layers][n_blocks][block_size][n_head_kv][head_dim] (the CPU cache's layout), or Q8_0 int8
// codes in that layout followed by every layer's f16 scales [n_layers][n_blocks][block_size]
// [n_head_kv][head_dim / 32] (attention.h, kv_q8.cuh).
struct CudaKvCache {
  void* k = nullptr;
  void* v = nullptr;
  KvType type = KvType::kF16;
  int32_t first_layer = 0;
  int32_t n_layers = 0;
  int32_t n_blocks = 0;  // including the scratch block padding rows write to
  int32_t block_size = 0;
  int64_t kv_dim = 0;

  // K and V together, of all n_layers layers (the memory plan's unit).
  static uint64_t bytes_per_block(const ModelConfig& config, KvType type, int32_t n_layers,
                                  int32_t block_size);
  static Result<CudaKvCache> allocate(DevicePool& pool, const ModelConfig& config, KvType type,
                                      int32_t first_layer, int32_t n_layers, int32_t n_blocks,
                                      int32_t block_size, cudaStream_t stream);
  uint64_t array_bytes() const;        // of k (or v): every layer's values, or codes and scales
  void* k_layer(int32_t layer) const;  // the layer's values or codes
  void* v_layer(int32_t layer) const;
  void* k_scales(int32_t layer) const;  // Q8_0: the layer's scales; else nullptr
  void* v_scales(int32_t layer) const;

 private:
  uint64_t elements_per_layer() const;
  void* layer_part(void* array, int32_t layer) const;
  void* scale_part(void* array, int32_t layer) const;
};

// The KV cache element types CUDA devices hold: F16 or Q8_0; an error names the others.
Result<KvType> cuda_kv_type(TensorType type);

// A Batch on the device. Values that become kernel parameters (counts, the table stride) are
// fixed for a given padded size, so a captured CUDA graph stays valid while the arrays change.
struct DeviceBatch {
  const int32_t* tokens = nullptr;
  const int32_t* positions = nullptr;
  const int32_t* seq_index = nullptr;
  const int32_t* logit_rows = nullptr;
  const int32_t* block_tables = nullptr;  // row stride blocks_per_seq
  const AttentionTile* tiles = nullptr;
  int32_t blocks_per_seq = 0;
  int32_t n_tokens = 0;
  int32_t n_logit_rows = 0;
  int32_t n_tiles = 0;
  int32_t max_tile_rows = 1;
  // Tiles [0, n) have one row each (a step's decode rows come first): AttentionArgs::
  // single_row_tiles; they cover rows [0, leading_single_rows) (fewer than the tiles when they
  // are split tiles).
  int32_t leading_single_row_tiles = 0;
  int32_t leading_single_rows = 0;
  // Every real row is its sequence's only row (a decode step): AttentionArgs::earlier_kv_settled.
  bool one_row_per_sequence = false;
  // Staged with a split row (BatchStaging::stage): no tile spans it, the first split_tiles
  // tiles cover the rows before it, and the others count their rows from it, so that
  // split_part() can run each side by itself. The whole batch's tiles are then not for
  // attention over all its rows.
  int32_t split_row = 0;
  int32_t split_tiles = 0;
  // Staged with split_positions (BatchStaging::stage): the tiles are splits of their rows, at
  // most this many a row (AttentionArgs::split_tiles); 0: one tile a row.
  int32_t max_row_splits = 0;
};

// Rows [0, split_row) (part 0) or [split_row, n_tokens) (part 1) of a batch staged with a split
// row, as a batch of their own without logit rows. PRECONDITION: batch.split_row > 0.
DeviceBatch split_part(const DeviceBatch& batch, int part);

// Sampling parameters of a pass's logit rows on the device, and where their tokens go: the
// sampling kernel writes `tokens` (device), which are copied back to `host_tokens` (pinned).
struct DeviceSampling {
  const RowSampling* params = nullptr;
  int32_t* tokens = nullptr;
  int32_t* host_tokens = nullptr;
  int32_t n_rows = 0;
};

// Refuses (kOutOfRange) a batch with a sequence longer than max_blocks_per_seq blocks of
// block_size tokens: what a staging sized by those limits cannot hold. BatchStaging::stage
// checks it too; multi-part executors check it before any part starts, so that a batch every
// part would refuse cannot leave one part waiting for another in a collective.
Status check_context_width(const Batch& batch, int32_t block_size, int32_t max_blocks_per_seq);

// Packs Batches into a pinned host buffer and copies them to their device mirror.
class BatchStaging {
 public:
  static Result<std::unique_ptr<BatchStaging>> create(DevicePool& pool, const CudaLimits& limits);
  ~BatchStaging();

  // Stages `batch` (validated; n_tokens <= max_tokens, n_seqs <= max_seqs), padded to
  // `padded_tokens` rows: padding rows are token 0 at position 0 of an extra sequence whose
  // blocks are all `scratch_block`, and they also get logit rows. Attention tiles group
  // consecutive rows of one sequence with consecutive positions, at most tile_rows each; with
  // split_row in (0, padded_tokens), none spans it (see DeviceBatch::split_row). With
  // split_positions > 0 and no split row, the leading one-row tiles (every tile of a decode
  // step, the decode rows ahead of a mixed pass's prompt tiles) are each cut into
  // ceil(context / split_positions) splits (DeviceBatch::max_row_splits; an error when the
  // tiles would not fit the staging buffer).
  // The copy is queued on `stream`; the host buffer may be reused after the stream passes it.
  Result<DeviceBatch> stage(const Batch& batch, int32_t padded_tokens, int32_t block_size,
                            int32_t scratch_block, int32_t tile_rows, cudaStream_t stream,
                            int32_t split_row = 0, int32_t split_positions = 0);
  // Stages one RowSampling per logit row (at most max_tokens), queued on `stream` like stage().
  Result<DeviceSampling> stage_sampling(std::span<const RowSampling> rows, cudaStream_t stream);

 private:
  BatchStaging() = default;
  CudaLimits limits_;
  int32_t* host_ = nullptr;  // pinned
  int32_t* device_ = nullptr;
  size_t table_offset_ = 0;     // int32 offset of the block tables in both buffers
  size_t sampling_offset_ = 0;  // int32 offset of the sampling parameters, then the tokens
};

}  // namespace llamaserve::cuda
