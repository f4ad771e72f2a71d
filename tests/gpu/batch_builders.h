// Batches for the multi-GPU tests: sequence s owns blocks [s * kBlocksPerSeq, ...), every row
// wants logits; deterministic token ids; one forward pass that returns the logits.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/batch.h"
#include "executor/executor.h"

namespace llamaserve::gpu_testing {

inline constexpr int32_t kBlocksPerSeq = 32;

// Rows of one sequence: its tokens from first_position on.
struct Rows {
  int32_t seq;
  std::vector<int32_t> tokens;
  int32_t first_position;
};

inline Batch build(const std::vector<Rows>& rows, int32_t n_seqs) {
  Batch b;
  b.blocks_per_seq = kBlocksPerSeq;
  b.seq_lengths.assign(static_cast<size_t>(n_seqs), 0);
  for (int32_t s = 0; s < n_seqs; ++s) {
    for (int32_t i = 0; i < kBlocksPerSeq; ++i) b.block_tables.push_back(s * kBlocksPerSeq + i);
  }
  for (const Rows& r : rows) {
    for (size_t i = 0; i < r.tokens.size(); ++i) {
      b.tokens.push_back(r.tokens[i]);
      b.positions.push_back(r.first_position + static_cast<int32_t>(i));
      b.seq_index.push_back(r.seq);
    }
    b.seq_lengths[static_cast<size_t>(r.seq)] =
        r.first_position + static_cast<int32_t>(r.tokens.size());
  }
  for (int32_t r = 0; r < b.n_tokens(); ++r) b.logit_rows.push_back(r);
  return b;
}

inline std::vector<int32_t> tokens(size_t n, int64_t n_vocab, int32_t salt) {
  std::vector<int32_t> out(n);
  for (size_t i = 0; i < n; ++i)
    out[i] = static_cast<int32_t>((i * 7919 + salt * 104729) % n_vocab);
  return out;
}

// The first two passes of the executor comparisons: a prefill of two sequences (90 and 41
// rows) and a mixed pass (a decode row of sequence 0, a chunk of sequence 1, a new sequence 2);
// the decode steps that follow start at lengths 91, 50 and 17.
inline std::vector<Batch> opening_batches(int64_t n_vocab) {
  std::vector<Batch> batches;
  batches.push_back(build({{0, tokens(90, n_vocab, 1), 0}, {1, tokens(41, n_vocab, 2), 0}}, 2));
  batches.push_back(build({{0, tokens(1, n_vocab, 3), 90},
                           {1, tokens(9, n_vocab, 4), 41},
                           {2, tokens(17, n_vocab, 5), 0}},
                          3));
  return batches;
}

inline std::vector<float> run(Executor& ex, const Batch& batch) {
  std::vector<float> logits(batch.logit_rows.size() * ex.config().n_vocab, NAN);
  const Status status = ex.forward(batch, logits);
  EXPECT_TRUE(status.is_ok()) << status.to_string();
  return logits;
}

}  // namespace llamaserve::gpu_testing
