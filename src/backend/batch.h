// Batch: the only input of a forward pass. Flat arrays, one entry per token row, so that
// prefill chunks and decode tokens of many sequences mix in one pass (continuous batching)
// and the arrays copy to a device as they are.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace llamaserve {

struct Batch {
  // Per token row (n_tokens entries each).
  std::vector<int32_t> tokens;     // token id
  std::vector<int32_t> positions;  // position of the token in its sequence (0-based)
  std::vector<int32_t> seq_index;  // which sequence of this batch the row belongs to

  // Per sequence of this batch (n_seqs entries). The sequence's KV blocks in logical order,
  // flattened with a fixed stride: block_tables[s * blocks_per_seq + i] is the physical
  // block holding positions [i * block_size, (i + 1) * block_size); unused tail entries are -1.
  std::vector<int32_t> block_tables;
  int32_t blocks_per_seq = 0;
  // Tokens of the sequence in the KV cache once this batch is written (= last position + 1).
  std::vector<int32_t> seq_lengths;

  // Token rows whose logits the caller wants, in the order the logits are returned.
  std::vector<int32_t> logit_rows;

  int32_t n_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t n_seqs() const { return static_cast<int32_t>(seq_lengths.size()); }
  const int32_t* block_table(int32_t seq) const {
    return block_tables.data() + static_cast<size_t>(seq) * blocks_per_seq;
  }

  void clear() {
    tokens.clear();
    positions.clear();
    seq_index.clear();
    block_tables.clear();
    seq_lengths.clear();
    logit_rows.clear();
  }
};

// How a device draws the token of one logit row (backend/cuda/sampling.h has the algorithm):
// greedy (lowest id among equal maxima) when temperature <= 0; otherwise softmax(logits /
// temperature) cut to the top_k most likely tokens (top_k <= 0: all), then to the smallest set
// reaching top_p of the mass (top_p >= 1: all), and one draw keyed by (seed, offset) so that a
// request that passes its step number as the offset gets the same tokens whatever else runs
// in the batch.
// `allowed` (structured output) restricts the draw to the tokens whose bit is set: host
// memory of allowed_words 64-bit words, bit t % 64 of word t / 64 for token t; tokens past
// allowed_words * 64 are never drawn. It must stay valid for the forward call; null: every token.
struct RowSampling {
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  uint64_t offset = 0;
  const uint64_t* allowed = nullptr;
  int32_t allowed_words = 0;
};

// Geometry of the paged KV cache an executor allocated. Blocks are the unit the engine's
// BlockManager hands out; every layer (and every device of a split model) uses the same
// block ids.
struct KvCacheInfo {
  int32_t n_blocks = 0;
  int32_t block_size = 0;        // tokens per block
  uint64_t bytes_per_block = 0;  // all layers, K and V, summed over devices
};

}  // namespace llamaserve
