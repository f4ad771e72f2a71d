// Which tensor-parallel sizes a model splits into: the one rule that the executor's shards
// (parallel/tp_shard.h) and the deployment plan (model/plan.h) both apply.
//
// Rank r of N holds query heads, KV heads and FFN columns [r X/N, (r+1) X/N) of every layer, so
// N must divide n_head, n_head_kv and n_ff. The attention output and FFN down matrices are split
// by columns: each rank takes a column range of every row, and a quantized row can only be cut
// between blocks, so each rank's range (q_dim / N and n_ff / N columns) must be whole blocks of
// the matrix's type. LLaMA-2-7B in Q4_K_M, for example, cannot run at tp 2: 11008 / 2 = 5504 FFN
// columns are not whole 256-element Q4_K / Q6_K blocks.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/config.h"
#include "quant/types.h"

namespace llamaserve {

struct ModelWeights;

// A matrix that tensor parallelism splits by columns (attention output, FFN down).
struct ColumnSplitMatrix {
  std::string name;  // GGUF name, for the message
  int64_t cols = 0;  // row length in elements
  TensorType type = TensorType::F32;
};

// Every layer's attention output and FFN down matrix of a loaded model.
std::vector<ColumnSplitMatrix> column_split_matrices(const ModelWeights& weights);

// What `n_ranks` does not divide, or empty when the model splits into n_ranks shards:
// "32 attention heads", "8 KV heads", "an FFN width of 11008", or the first column-split matrix
// whose per-rank range is not whole blocks, "blk.0.ffn_down.weight (11008 columns in
// 256-element Q6_K blocks)". The phrases complete "tensor parallel N does not divide ...".
std::string tensor_parallel_problem(const ModelConfig& config,
                                    std::span<const ColumnSplitMatrix> column_split, int n_ranks);

}  // namespace llamaserve
