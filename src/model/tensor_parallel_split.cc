#include "model/tensor_parallel_split.h"

#include <fmt/format.h>

#include "model/weights.h"

namespace llamaserve {

std::vector<ColumnSplitMatrix> column_split_matrices(const ModelWeights& weights) {
  std::vector<ColumnSplitMatrix> matrices;
  matrices.reserve(2 * weights.layers.size());
  for (const LayerWeights& l : weights.layers) {
    for (const QTensor* t : {&l.wo, &l.w_down}) matrices.push_back({t->name, t->cols(), t->type});
  }
  return matrices;
}

std::string tensor_parallel_problem(const ModelConfig& config,
                                    std::span<const ColumnSplitMatrix> column_split, int n_ranks) {
  if (n_ranks < 1) return "the number of ranks must be >= 1";
  if (config.n_head % n_ranks != 0) return fmt::format("{} attention heads", config.n_head);
  if (config.n_head_kv % n_ranks != 0) return fmt::format("{} KV heads", config.n_head_kv);
  if (config.n_ff % n_ranks != 0) return fmt::format("an FFN width of {}", config.n_ff);
  for (const ColumnSplitMatrix& m : column_split) {
    const uint32_t block = traits(m.type).block_elems;
    if (m.cols % n_ranks != 0 || (m.cols / n_ranks) % block != 0) {
      return fmt::format("{} ({} columns in {}-element {} blocks)", m.name, m.cols, block,
                         type_name(m.type));
    }
  }
  return {};
}

}  // namespace llamaserve
