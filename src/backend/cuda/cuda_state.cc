#include "backend/cuda/cuda_state.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/device_matrix.h"
#include "quant/types.h"

namespace llamaserve::cuda {
namespace {

struct ActivationSizes {
  int64_t embd, q, kv, ff, vocab;  // row widths (floats), padded
  int64_t qkv() const { return q + 2 * kv; }
};

ActivationSizes sizes_of(const ModelConfig& c) {
  return {padded_row(c.n_embd), padded_row(c.q_dim()), padded_row(c.kv_dim()), padded_row(c.n_ff),
          padded_row(c.n_vocab)};
}

uint64_t floats_bytes(uint64_t n) { return align_up(n * sizeof(float), kDeviceAlignment); }

uint64_t partial_floats(const ModelConfig& c, const CudaLimits& l) {
  return static_cast<uint64_t>(l.max_split_rows) * c.n_head * (c.head_dim + 2);
}

// The decode kernel's split arrivals: one per (row, KV head) of any pass with splits.
uint64_t split_counters(const ModelConfig& c, const CudaLimits& l) {
  return static_cast<uint64_t>(l.max_split_rows) * c.n_head_kv;
}

int64_t max_gemm_cols(const ModelConfig& c) { return std::max({c.n_embd, c.q_dim(), c.n_ff}); }

// int32 slots of the staging buffers before the block tables: tokens, positions, seq_index,
// logit_rows (max_tokens each) and tiles (max_tokens of kTileInts), rounded to 256 bytes.
constexpr int64_t kTileInts = sizeof(AttentionTile) / sizeof(int32_t);
static_assert(sizeof(AttentionTile) % sizeof(int32_t) == 0);
int64_t staged_ints(const CudaLimits& l) { return (4 + kTileInts) * l.max_tokens; }
size_t table_offset(const CudaLimits& l) {
  return align_up(static_cast<uint64_t>(staged_ints(l)), kDeviceAlignment / 4);
}
// Then the sampling parameters of the logit rows (max_tokens RowSamplings) and their drawn
// tokens (max_tokens), 256-byte aligned.
constexpr size_t kIntsPerSampling = sizeof(RowSampling) / sizeof(int32_t);
static_assert(sizeof(RowSampling) % sizeof(int32_t) == 0 && alignof(RowSampling) <= 8);
size_t sampling_offset(const CudaLimits& l) {
  return align_up(table_offset(l) + static_cast<uint64_t>(l.max_seqs + 1) * l.max_blocks_per_seq,
                  kDeviceAlignment / 4);
}
size_t staging_ints(const CudaLimits& l) {
  return sampling_offset(l) + static_cast<size_t>(l.max_tokens) * (kIntsPerSampling + 1);
}

// Bytes of `values` cache values of `type`: f16, or Q8_0 codes and scales (GGUF's 34 bytes for
// 32 values, split in two arrays).
uint64_t kv_bytes(KvType type, uint64_t values) {
  return row_bytes(type == KvType::kQ8_0 ? TensorType::Q8_0 : TensorType::F16, values);
}

}  // namespace

uint64_t CudaActivations::bytes(const ModelConfig& c, const CudaLimits& l) {
  const ActivationSizes s = sizes_of(c);
  const uint64_t t = static_cast<uint64_t>(l.max_tokens),
                 r = static_cast<uint64_t>(l.max_logit_rows);
  return 2 * floats_bytes(t * s.embd) + floats_bytes(t * s.qkv()) + floats_bytes(t * s.q) +
         floats_bytes(t * 2 * s.ff) + floats_bytes(r * s.embd) + floats_bytes(r * s.vocab) +
         floats_bytes(partial_floats(c, l)) +
         (l.half_sums ? align_up(t * s.embd * 2, kDeviceAlignment) : 0) +
         align_up(split_counters(c, l) * sizeof(unsigned int), kDeviceAlignment) +
         q8_rows_bytes(l.max_matvec_rows, max_gemm_cols(c)) +
         align_up(gemm_act_half_bytes(l.max_tokens, max_gemm_cols(c)), kDeviceAlignment) +
         align_up(static_cast<uint64_t>(l.gemm_scratch_elems) * 2, kDeviceAlignment) +
         align_up(staging_ints(l) * sizeof(int32_t), kDeviceAlignment);  // BatchStaging's mirror
}

Result<CudaActivations> CudaActivations::allocate(DevicePool& pool, const ModelConfig& c,
                                                  const CudaLimits& l) {
  const ActivationSizes s = sizes_of(c);
  CudaActivations a;
  a.embd_stride = s.embd;
  // Q, K and V side by side in one row (and gate and up in another), so that a prefill's
  // projections of one input can run as one GEMM over weights uploaded back to back
  // (CudaBackend::project): more output tiles than three narrow GEMMs, above all for the
  // shards of tensor parallelism.
  a.q_stride = s.qkv();
  a.kv_stride = s.qkv();
  a.attn_stride = s.q;
  a.ff_stride = 2 * s.ff;
  a.vocab_stride = s.vocab;
  const uint64_t t = static_cast<uint64_t>(l.max_tokens),
                 r = static_cast<uint64_t>(l.max_logit_rows);
  LS_ASSIGN_OR_RETURN(a.hidden, pool.allocate_array<float>(t * s.embd, "hidden states"));
  LS_ASSIGN_OR_RETURN(a.normed, pool.allocate_array<float>(t * s.embd, "normed states"));
  LS_ASSIGN_OR_RETURN(a.q, pool.allocate_array<float>(t * s.qkv(), "queries, keys and values"));
  a.k = a.q + s.q;
  a.v = a.k + s.kv;
  LS_ASSIGN_OR_RETURN(a.attn, pool.allocate_array<float>(t * s.q, "attention output"));
  LS_ASSIGN_OR_RETURN(a.gate, pool.allocate_array<float>(t * 2 * s.ff, "ffn gate and up"));
  a.up = a.gate + s.ff;
  LS_ASSIGN_OR_RETURN(a.head_rows, pool.allocate_array<float>(r * s.embd, "head rows"));
  LS_ASSIGN_OR_RETURN(a.logits, pool.allocate_array<float>(r * s.vocab, "logits"));
  if (l.half_sums) {
    LS_ASSIGN_OR_RETURN(a.sum_half, pool.allocate(t * s.embd * 2, "tensor-parallel sums"));
  }
  LS_ASSIGN_OR_RETURN(a.attention_partial,
                      pool.allocate_array<float>(partial_floats(c, l), "attention partials"));
  LS_ASSIGN_OR_RETURN(a.attention_counters, pool.allocate_array<unsigned int>(
                                                split_counters(c, l), "attention split counters"));
  LS_CUDA_CHECK(cudaMemset(a.attention_counters, 0, split_counters(c, l) * sizeof(unsigned int)));
  if (l.max_matvec_rows > 0) {
    LS_ASSIGN_OR_RETURN(void* q8, pool.allocate(q8_rows_bytes(l.max_matvec_rows, max_gemm_cols(c)),
                                                "8-bit activations"));
    a.q8 = q8_rows_view(q8, l.max_matvec_rows, max_gemm_cols(c));
  }
  a.gemm.act_half_bytes = gemm_act_half_bytes(l.max_tokens, max_gemm_cols(c));
  LS_ASSIGN_OR_RETURN(a.gemm.act_half, pool.allocate(a.gemm.act_half_bytes, "GEMM activations"));
  a.gemm.weight_half_bytes = static_cast<size_t>(l.gemm_scratch_elems) * 2;
  if (a.gemm.weight_half_bytes > 0) {
    LS_ASSIGN_OR_RETURN(a.gemm.weight_half,
                        pool.allocate(a.gemm.weight_half_bytes, "GEMM weights"));
  }
  return a;
}

uint64_t CudaKvCache::bytes_per_block(const ModelConfig& c, KvType type, int32_t n_layers,
                                      int32_t block_size) {
  return 2 * kv_bytes(type, static_cast<uint64_t>(n_layers) * block_size * c.kv_dim());
}

Result<CudaKvCache> CudaKvCache::allocate(DevicePool& pool, const ModelConfig& c, KvType type,
                                          int32_t first_layer, int32_t n_layers, int32_t n_blocks,
                                          int32_t block_size, cudaStream_t stream) {
  if (type == KvType::kQ8_0 && c.head_dim % kKvQ8Block != 0) {
    return make_error(StatusCode::kUnsupported,
                      "a Q8_0 KV cache needs a head dimension that is a multiple of {}, not {}",
                      kKvQ8Block, c.head_dim);
  }
  CudaKvCache kv;
  kv.type = type;
  kv.first_layer = first_layer;
  kv.n_layers = n_layers;
  kv.n_blocks = n_blocks;
  kv.block_size = block_size;
  kv.kv_dim = c.kv_dim();
  const uint64_t bytes = kv.array_bytes();
  LS_ASSIGN_OR_RETURN(kv.k, pool.allocate(bytes, "K cache"));
  LS_ASSIGN_OR_RETURN(kv.v, pool.allocate(bytes, "V cache"));
  // Zeros: a slot attention reads before any write (padding lanes) holds finite values.
  LS_CUDA_CHECK(cudaMemsetAsync(kv.k, 0, bytes, stream));
  LS_CUDA_CHECK(cudaMemsetAsync(kv.v, 0, bytes, stream));
  return kv;
}

Result<KvType> cuda_kv_type(TensorType type) {
  if (type == TensorType::F16) return KvType::kF16;
  if (type == TensorType::Q8_0) return KvType::kQ8_0;
  return make_error(StatusCode::kUnsupported,
                    "KV cache type {} is not supported on CUDA devices (F16 or Q8_0)",
                    type_name(type));
}

CudaActivations CudaActivations::rows_from(int64_t first_row) const {
  CudaActivations v = *this;
  v.hidden += first_row * embd_stride;
  v.normed += first_row * embd_stride;
  v.q += first_row * q_stride;
  v.k += first_row * kv_stride;
  v.v += first_row * kv_stride;
  v.attn += first_row * attn_stride;
  v.gate += first_row * ff_stride;
  v.up += first_row * ff_stride;
  if (v.sum_half != nullptr)
    v.sum_half = static_cast<uint16_t*>(v.sum_half) + first_row * embd_stride;
  return v;
}

uint64_t CudaKvCache::elements_per_layer() const {
  return static_cast<uint64_t>(n_blocks) * block_size * static_cast<uint64_t>(kv_dim);
}
uint64_t CudaKvCache::array_bytes() const {
  return kv_bytes(type, elements_per_layer() * n_layers);
}
void* CudaKvCache::layer_part(void* array, int32_t layer) const {
  const uint64_t element_bytes = type == KvType::kQ8_0 ? 1 : 2;
  return static_cast<uint8_t*>(array) +
         (layer - first_layer) * elements_per_layer() * element_bytes;
}
void* CudaKvCache::scale_part(void* array, int32_t layer) const {
  if (type != KvType::kQ8_0) return nullptr;
  const uint64_t scales = elements_per_layer() / kKvQ8Block;
  return static_cast<uint8_t*>(array) + elements_per_layer() * n_layers +
         (layer - first_layer) * scales * 2;
}
void* CudaKvCache::k_layer(int32_t layer) const { return layer_part(k, layer); }
void* CudaKvCache::v_layer(int32_t layer) const { return layer_part(v, layer); }
void* CudaKvCache::k_scales(int32_t layer) const { return scale_part(k, layer); }
void* CudaKvCache::v_scales(int32_t layer) const { return scale_part(v, layer); }

Result<std::unique_ptr<BatchStaging>> BatchStaging::create(DevicePool& pool, const CudaLimits& l) {
  std::unique_ptr<BatchStaging> s(new BatchStaging());
  s->limits_ = l;
  s->table_offset_ = table_offset(l);
  s->sampling_offset_ = sampling_offset(l);
  const size_t bytes = staging_ints(l) * sizeof(int32_t);
  void* host = nullptr;
  LS_CUDA_CHECK(cudaMallocHost(&host, bytes));
  s->host_ = static_cast<int32_t*>(host);
  std::memset(host, 0, bytes);
  LS_ASSIGN_OR_RETURN(s->device_, pool.allocate_array<int32_t>(staging_ints(l), "batch arrays"));
  return s;
}

BatchStaging::~BatchStaging() {
  if (host_ != nullptr) LS_CUDA_LOG_ERROR(cudaFreeHost(host_));
}

Status check_context_width(const Batch& batch, int32_t block_size, int32_t max_blocks_per_seq) {
  for (int32_t s = 0; s < batch.n_seqs(); ++s) {
    const int32_t needed = (batch.seq_lengths[s] + block_size - 1) / block_size;
    if (needed > max_blocks_per_seq) {
      return make_error(StatusCode::kOutOfRange,
                        "sequence {} of the batch has {} tokens; the CUDA executor was sized for "
                        "{} ({} blocks of {})",
                        s, batch.seq_lengths[s],
                        static_cast<int64_t>(max_blocks_per_seq) * block_size, max_blocks_per_seq,
                        block_size);
    }
  }
  return Status::ok();
}

DeviceBatch split_part(const DeviceBatch& batch, int part) {
  DeviceBatch d = batch;
  d.n_logit_rows = 0;
  d.split_row = 0;
  d.split_tiles = 0;
  d.leading_single_row_tiles = 0;  // each part's attention on one kernel
  if (part == 0) {
    d.n_tokens = batch.split_row;
    d.n_tiles = batch.split_tiles;
  } else {
    d.tokens += batch.split_row;
    d.positions += batch.split_row;
    d.seq_index += batch.split_row;
    d.tiles += batch.split_tiles;
    d.n_tokens = batch.n_tokens - batch.split_row;
    d.n_tiles = batch.n_tiles - batch.split_tiles;
  }
  return d;
}

Result<DeviceBatch> BatchStaging::stage(const Batch& batch, int32_t padded_tokens,
                                        int32_t block_size, int32_t scratch_block,
                                        int32_t tile_rows, cudaStream_t stream, int32_t split_row,
                                        int32_t split_positions) {
  const int32_t n = batch.n_tokens();
  const int32_t n_seqs = batch.n_seqs();
  const int64_t t_max = limits_.max_tokens;
  if (padded_tokens < n || padded_tokens > t_max || n_seqs > limits_.max_seqs) {
    return make_error(StatusCode::kInvalidArgument,
                      "batch of {} rows (padded to {}) and {} sequences exceeds the staging limits "
                      "({} rows, {} sequences)",
                      n, padded_tokens, n_seqs, t_max, limits_.max_seqs);
  }
  if (batch.logit_rows.size() + static_cast<size_t>(padded_tokens - n) >
      static_cast<size_t>(t_max)) {
    return make_error(StatusCode::kInvalidArgument, "{} logit rows exceed the staging limit of {}",
                      batch.logit_rows.size(), t_max);
  }
  int32_t* tokens = host_;
  int32_t* positions = host_ + t_max;
  int32_t* seq_index = host_ + 2 * t_max;
  int32_t* logit_rows = host_ + 3 * t_max;
  auto* tiles = reinterpret_cast<AttentionTile*>(host_ + 4 * t_max);
  int32_t* tables = host_ + table_offset_;
  const int32_t stride = limits_.max_blocks_per_seq;

  for (int32_t r = 0; r < padded_tokens; ++r) {
    const bool real = r < n;
    tokens[r] = real ? batch.tokens[r] : 0;
    positions[r] = real ? batch.positions[r] : 0;
    seq_index[r] = real ? batch.seq_index[r] : n_seqs;
  }
  int32_t n_logit_rows = 0;
  for (int32_t row : batch.logit_rows) logit_rows[n_logit_rows++] = row;
  for (int32_t r = n; r < padded_tokens; ++r) logit_rows[n_logit_rows++] = r;

  if (split_row < 0 || split_row >= padded_tokens) split_row = 0;
  int32_t n_tiles = 0, max_tile_rows = 1, split_tiles = 0, leading_single_row_tiles = 0;
  for (int32_t r = 0; r < padded_tokens;) {
    int32_t len = 1;
    while (r + len < padded_tokens && r + len != split_row && len < tile_rows &&
           seq_index[r + len] == seq_index[r] && positions[r + len] == positions[r + len - 1] + 1) {
      ++len;
    }
    const bool after_split = split_row > 0 && r >= split_row;
    tiles[n_tiles++] = {after_split ? r - split_row : r, len, 0, 0};
    if (split_row > 0 && !after_split) ++split_tiles;
    max_tile_rows = std::max(max_tile_rows, len);
    if (max_tile_rows == 1) leading_single_row_tiles = n_tiles;
    r += len;
  }

  // Splits of their own for rows of long contexts: the leading one-row tiles (a decode step's
  // rows, or the decode rows ahead of a mixed pass's prompt tiles, which keep their tiles).
  int32_t max_row_splits = 0;
  int32_t leading_single_rows = leading_single_row_tiles;
  if (split_positions > 0 && split_row == 0 && leading_single_rows > 0) {
    auto splits_of = [&](int32_t r) {
      return std::max(1, (positions[r] + split_positions) / split_positions);
    };
    const int32_t rest_tiles = n_tiles - leading_single_rows;
    int32_t total = rest_tiles;
    for (int32_t r = 0; r < leading_single_rows; ++r) total += splits_of(r);
    if (total > t_max) {
      return make_error(StatusCode::kInvalidArgument,
                        "{} rows cut in {}-position splits make {} tiles, over the staging "
                        "limit of {}",
                        leading_single_rows, split_positions, total, t_max);
    }
    // The rest's tiles move to the end first (right, over themselves), then the split ones
    // fill the front.
    std::copy_backward(tiles + leading_single_rows, tiles + n_tiles, tiles + total);
    n_tiles = 0;
    for (int32_t r = 0; r < leading_single_rows; ++r) {
      const int32_t splits = splits_of(r);
      for (int32_t s = 0; s < splits; ++s) tiles[n_tiles++] = {r, 1, s, splits};
      max_row_splits = std::max(max_row_splits, splits);
    }
    leading_single_row_tiles = n_tiles;
    n_tiles = total;
  }

  LS_RETURN_IF_ERROR(check_context_width(batch, block_size, stride));
  int32_t width = 1;
  for (int32_t s = 0; s < n_seqs; ++s) {
    const int32_t needed = (batch.seq_lengths[s] + block_size - 1) / block_size;
    if (needed > batch.blocks_per_seq) {
      return make_error(StatusCode::kInvalidArgument,
                        "sequence {} has {} tokens but its block table only {} entries", s,
                        batch.seq_lengths[s], batch.blocks_per_seq);
    }
    std::copy_n(batch.block_table(s), needed, tables + static_cast<size_t>(s) * stride);
    width = std::max(width, needed);
  }
  std::fill_n(tables + static_cast<size_t>(n_seqs) * stride, width, scratch_block);

  LS_CUDA_CHECK(cudaMemcpyAsync(device_, host_, staged_ints(limits_) * sizeof(int32_t),
                                cudaMemcpyHostToDevice, stream));
  LS_CUDA_CHECK(cudaMemcpy2DAsync(device_ + table_offset_, stride * sizeof(int32_t),
                                  host_ + table_offset_, stride * sizeof(int32_t),
                                  width * sizeof(int32_t), n_seqs + 1, cudaMemcpyHostToDevice,
                                  stream));
  DeviceBatch d;
  d.tokens = device_;
  d.positions = device_ + t_max;
  d.seq_index = device_ + 2 * t_max;
  d.logit_rows = device_ + 3 * t_max;
  d.tiles = reinterpret_cast<const AttentionTile*>(device_ + 4 * t_max);
  d.block_tables = device_ + table_offset_;
  d.blocks_per_seq = stride;
  d.n_tokens = padded_tokens;
  d.n_logit_rows = n_logit_rows;
  d.n_tiles = n_tiles;
  d.max_tile_rows = max_tile_rows;
  d.leading_single_row_tiles = split_row > 0 ? 0 : leading_single_row_tiles;
  d.leading_single_rows = split_row > 0 ? 0 : leading_single_rows;
  d.one_row_per_sequence = true;
  std::vector<bool> has_row(static_cast<size_t>(n_seqs), false);
  for (int32_t r = 0; r < n && d.one_row_per_sequence; ++r) {
    d.one_row_per_sequence = !has_row[batch.seq_index[r]];
    has_row[batch.seq_index[r]] = true;
  }
  d.split_row = split_row;
  d.split_tiles = split_tiles;
  d.max_row_splits = max_row_splits;
  return d;
}

Result<DeviceSampling> BatchStaging::stage_sampling(std::span<const RowSampling> rows,
                                                    cudaStream_t stream) {
  const size_t t_max = static_cast<size_t>(limits_.max_tokens);
  if (rows.size() > t_max) {
    return make_error(StatusCode::kInvalidArgument,
                      "{} rows to sample exceed the staging limit of {}", rows.size(), t_max);
  }
  auto* host_params = reinterpret_cast<RowSampling*>(host_ + sampling_offset_);
  std::copy(rows.begin(), rows.end(), host_params);
  int32_t* device_params = device_ + sampling_offset_;
  if (!rows.empty()) {
    LS_CUDA_CHECK(cudaMemcpyAsync(device_params, host_params, rows.size() * sizeof(RowSampling),
                                  cudaMemcpyHostToDevice, stream));
  }
  const size_t tokens_offset = sampling_offset_ + t_max * kIntsPerSampling;
  DeviceSampling d;
  d.params = reinterpret_cast<const RowSampling*>(device_params);
  d.tokens = device_ + tokens_offset;
  d.host_tokens = host_ + tokens_offset;
  d.n_rows = static_cast<int32_t>(rows.size());
  return d;
}

}  // namespace llamaserve::cuda
