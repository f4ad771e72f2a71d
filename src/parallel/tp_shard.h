// Tensor-parallel shards of a model: rank r of N holds query heads [r H/N, (r+1) H/N), KV heads
// [r Hkv/N, (r+1) Hkv/N) and FFN columns [r F/N, (r+1) F/N) of every layer. The Q/K/V and
// gate/up matrices are split by rows (views into the file mapping, nothing copied); the
// attention output and FFN down matrices by columns (copied per rank, since a column range of
// a row-major matrix is not contiguous). Each rank's products then sum to the full layer's:
// the executor all-reduces them. Embeddings, norms and the output head stay whole on every
// rank.
#pragma once

#include <memory>
#include <vector>

#include "core/status.h"
#include "model/weights.h"

namespace llamaserve {

// The N in [1, max_ranks] a model splits into: N divides the heads, the KV heads and the FFN
// width, and the column ranges of the attention output and FFN down matrices fall on whole
// quantization blocks (model/tensor_parallel_split.h, the rule `llamaserve plan` applies too).
std::vector<int> valid_tensor_parallel_sizes(const LoadedModel& model, int max_ranks);

// Checks that `n_ranks` is valid, with an error listing the valid sizes otherwise.
Status check_tensor_parallel(const LoadedModel& model, int n_ranks);

// Rank `rank`'s shard. Its config has n_head, n_head_kv and n_ff divided by n_ranks (so
// kv_dim and q_dim are the rank's); its `file` is null (the shard keeps `model` alive; take
// the tokenizer and metadata from the full model).
Result<std::shared_ptr<const LoadedModel>> tensor_parallel_shard(
    std::shared_ptr<const LoadedModel> model, int rank, int n_ranks);

}  // namespace llamaserve
