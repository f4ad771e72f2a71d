#include "parallel/tp_shard.h"

#include <cstring>
#include <string>

#include <fmt/format.h>

#include "model/tensor_parallel_split.h"

namespace llamaserve {
namespace {

// Rows [begin, begin + count) of a matrix, or elements of a vector: a view.
QTensor row_slice(const QTensor& t, int64_t begin, int64_t count) {
  QTensor out = t;
  out.shape[0] = count;
  out.data = t.row(begin);
  out.n_bytes = static_cast<size_t>(count) * t.bytes_per_row();
  return out;
}

QTensor vector_slice(const QTensor& t, int64_t begin, int64_t count) {
  QTensor out = t;
  out.shape = {count};
  out.data = t.f32() + begin;
  out.n_bytes = static_cast<size_t>(count) * sizeof(float);
  return out;
}

// Columns [begin, begin + count) of every row, copied into `storage`.
QTensor column_slice(const QTensor& t, int64_t begin, int64_t count,
                     std::vector<uint8_t>& storage) {
  const size_t offset = row_bytes(t.type, static_cast<size_t>(begin));
  const size_t bytes = row_bytes(t.type, static_cast<size_t>(count));
  storage.resize(bytes * static_cast<size_t>(t.rows()));
  for (int64_t r = 0; r < t.rows(); ++r) {
    std::memcpy(storage.data() + static_cast<size_t>(r) * bytes, t.row(r) + offset, bytes);
  }
  QTensor out = t;
  out.shape = {t.rows(), count};
  out.data = storage.data();
  out.n_bytes = storage.size();
  return out;
}

struct ShardHolder {
  std::shared_ptr<const LoadedModel> full;
  std::vector<std::vector<uint8_t>> storage;
  LoadedModel shard;
};

}  // namespace

std::vector<int> valid_tensor_parallel_sizes(const LoadedModel& model, int max_ranks) {
  const std::vector<ColumnSplitMatrix> column_split = column_split_matrices(model.weights);
  std::vector<int> sizes;
  for (int n = 1; n <= max_ranks; ++n) {
    if (tensor_parallel_problem(model.config, column_split, n).empty()) sizes.push_back(n);
  }
  return sizes;
}

Status check_tensor_parallel(const LoadedModel& model, int n_ranks) {
  const std::string problem =
      tensor_parallel_problem(model.config, column_split_matrices(model.weights), n_ranks);
  if (problem.empty()) return Status::ok();
  return make_error(StatusCode::kInvalidArgument,
                    "tensor parallel {} does not divide {}; valid sizes for this model: {}",
                    n_ranks, problem, fmt::join(valid_tensor_parallel_sizes(model, 64), ", "));
}

Result<std::shared_ptr<const LoadedModel>> tensor_parallel_shard(
    std::shared_ptr<const LoadedModel> model, int rank, int n_ranks) {
  if (!model) return make_error(StatusCode::kInvalidArgument, "tensor_parallel_shard: no model");
  LS_RETURN_IF_ERROR(check_tensor_parallel(*model, n_ranks));
  if (rank < 0 || rank >= n_ranks) {
    return make_error(StatusCode::kInvalidArgument, "rank {} of {} does not exist", rank, n_ranks);
  }
  auto holder = std::make_shared<ShardHolder>();
  holder->full = model;
  LoadedModel& shard = holder->shard;
  const ModelConfig& c = model->config;
  shard.config = c;
  shard.config.n_head = c.n_head / n_ranks;
  shard.config.n_head_kv = c.n_head_kv / n_ranks;
  shard.config.n_ff = c.n_ff / n_ranks;
  const int64_t q_dim = shard.config.q_dim(), kv_dim = shard.config.kv_dim();
  const int64_t n_ff = shard.config.n_ff;

  const ModelWeights& w = model->weights;
  shard.weights.token_embd = w.token_embd;
  shard.weights.output_norm = w.output_norm;
  shard.weights.output = w.output;
  shard.weights.rope_freqs = w.rope_freqs;
  holder->storage.resize(2 * w.layers.size());
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const LayerWeights& l = w.layers[i];
    LayerWeights s;
    s.attn_norm = l.attn_norm;
    s.ffn_norm = l.ffn_norm;
    s.wq = row_slice(l.wq, rank * q_dim, q_dim);
    s.wk = row_slice(l.wk, rank * kv_dim, kv_dim);
    s.wv = row_slice(l.wv, rank * kv_dim, kv_dim);
    if (l.bq) s.bq = vector_slice(*l.bq, rank * q_dim, q_dim);
    if (l.bk) s.bk = vector_slice(*l.bk, rank * kv_dim, kv_dim);
    if (l.bv) s.bv = vector_slice(*l.bv, rank * kv_dim, kv_dim);
    s.wo = column_slice(l.wo, rank * q_dim, q_dim, holder->storage[2 * i]);
    s.w_gate = row_slice(l.w_gate, rank * n_ff, n_ff);
    s.w_up = row_slice(l.w_up, rank * n_ff, n_ff);
    s.w_down = column_slice(l.w_down, rank * n_ff, n_ff, holder->storage[2 * i + 1]);
    shard.weights.layers.push_back(std::move(s));
  }
  return std::shared_ptr<const LoadedModel>(holder, &holder->shard);
}

}  // namespace llamaserve
