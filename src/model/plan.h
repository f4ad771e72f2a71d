// Deployment planning: how a model's weights, KV cache and activations spread over G GPUs
// for each tensor-parallel × pipeline × replica layout, and which layouts hold a given
// context length at a given concurrency. Pure arithmetic, no devices: `llamaserve plan`
// prints it with the steps spelled out so that an operator can check it by hand.
//
// Placement assumptions (what the numbers mean), those of the server's executors except for
// the stage sizes:
//   - pipeline stages own contiguous layer ranges; the first n_layer % pp stages get one
//     layer more than the others (the server balances its stages by weight bytes instead);
//   - tensor parallelism splits each layer's matrices (heads, FFN columns) and its KV heads
//     evenly over tp ranks; norms are replicated on every rank. A tp is possible only where
//     the executor can cut the matrices: tensor_parallel_problem (tensor_parallel_split.h);
//   - token_embd lives whole on every rank of the first stage (a lookup, not worth
//     splitting); the output matrix lives whole on every rank of the last stage (the
//     tensor-parallel executor does not split the head); a tied head needs token_embd whole
//     on the last stage too;
//   - every GPU keeps its own activations for max_batch_tokens rows, the logits of its
//     sequences over the whole vocabulary, and a fixed workspace; under tensor parallelism
//     also three half-precision copies of those rows' hidden states for the sums.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/config.h"
#include "model/tensor_parallel_split.h"
#include "quant/types.h"

namespace llamaserve {

struct NamedTensorBytes {
  std::string name;  // GGUF tensor name
  uint64_t n_bytes = 0;
  // Row length in elements (GGUF dims[0]) and type: where tensor parallelism may cut the
  // rows of the attention output and FFN down matrices. Needed for those two.
  int64_t cols = 0;
  TensorType type = TensorType::F32;
};

// A model's weight bytes grouped by where they are placed.
struct WeightBytes {
  uint64_t token_embd = 0;
  uint64_t output = 0;  // 0 when tied: the head reuses token_embd
  uint64_t output_norm = 0;
  uint64_t other = 0;  // small tensors outside the layers (rope_freqs), on every GPU
  bool tied_output = false;
  std::vector<uint64_t> layer_split;            // per layer: matrices, divided by tp
  std::vector<uint64_t> layer_replicated;       // per layer: norms and biases, on every rank
  std::vector<ColumnSplitMatrix> column_split;  // attn_output and ffn_down of every layer

  uint64_t total() const;
};

// Groups tensors by name (token_embd.weight, output.weight, output_norm.weight,
// blk.N.*; norms are the names containing "_norm"). Errors on a layer index outside
// [0, n_layer), and on an attn_output or ffn_down matrix without its row length.
Result<WeightBytes> group_weight_bytes(std::span<const NamedTensorBytes> tensors,
                                       const ModelConfig& config);

struct PlanRequest {
  ModelConfig config;
  WeightBytes weights;
  int64_t n_ctx = 4096;     // tokens per sequence
  int64_t concurrency = 1;  // sequences in flight over the whole deployment
  int gpus = 1;
  uint64_t gpu_memory_bytes = 0;            // per GPU
  double gpu_memory_utilization = 0.90;     // share of gpu_memory_bytes the server may use
  TensorType kv_type = TensorType::F16;     // F16 or Q8_0
  int32_t kv_block_size = 16;               // tokens per KV block: a sequence holds whole blocks
  int32_t max_batch_tokens = 512;           // rows per forward pass (sizes the activations)
  uint64_t workspace_bytes = 256ull << 20;  // per GPU: GEMM workspace and scratch
};

struct LayoutPlan {
  int tp = 1;
  int pp = 1;
  int replicas = 1;
  // Empty when the layout can be built; otherwise why not ("tp 2 does not divide 40
  // attention heads", or a matrix the shards cannot cut on block boundaries).
  std::string impossible_reason;

  int64_t max_layers_per_stage = 0;
  // The numbers of the tightest GPU (the one with the fewest free KV tokens).
  int tight_stage = 0;
  uint64_t weights_per_gpu = 0;
  uint64_t activations_per_gpu = 0;
  uint64_t budget_per_gpu = 0;
  int64_t free_kv_bytes_per_gpu = 0;  // negative: the weights alone do not fit
  uint64_t kv_bytes_per_token_per_gpu = 0;
  int64_t kv_tokens_per_replica = 0;  // whole blocks
  int64_t seqs_per_replica = 0;       // ceil(concurrency / replicas)
  int64_t kv_tokens_needed = 0;       // seqs_per_replica × tokens per sequence
  int64_t max_concurrency = 0;        // sequences of n_ctx tokens the deployment holds
  bool fits = false;

  // The arithmetic, one step per line, with the numbers filled in.
  std::vector<std::string> steps;
};

struct PlanReport {
  PlanRequest request;
  uint64_t kv_bytes_per_token = 0;     // whole model, one token, K and V, all layers
  int64_t tokens_per_sequence = 0;     // n_ctx rounded up to whole KV blocks
  uint64_t kv_bytes_per_sequence = 0;  // tokens_per_sequence × kv_bytes_per_token
  std::vector<LayoutPlan> layouts;     // every tp × pp × replicas = gpus, tp ascending
  // Index into layouts of the suggestion: among the layouts that fit, the most replicas
  // (throughput), then the fewest pipeline stages (no pipeline bubbles).
  std::optional<size_t> recommended;
};

Result<PlanReport> make_plan(const PlanRequest& request);

// "141GB", "141 GiB", "80G", "1.5TB", plain bytes. GB/TB are powers of 1000, GiB/TiB of 1024,
// and a bare G/T means GiB/TiB.
Result<uint64_t> parse_byte_size(std::string_view text);

// "13.48 GiB", "3.25 MiB" or "512 B": two decimals of the largest unit that is at least 1,
// for the explanations.
std::string format_size(uint64_t bytes);

}  // namespace llamaserve
