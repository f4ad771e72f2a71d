// Batches larger than an executor's pass: the rows in pieces of at most max_rows, in row
// order (rows of a sequence are in position order, so every K/V a later piece reads is written
// by an earlier one), each piece's logits scattered to their rows of the whole batch's.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "backend/batch.h"
#include "core/status.h"

namespace llamaserve {

// Reused between calls so that steady-state passes allocate nothing.
struct PieceScratch {
  Batch piece;
  std::vector<size_t> destinations;  // row of `logits` for each logit row of the piece
  std::vector<float> logits;
};

// Calls run(piece, piece_logits) -> Status for each piece (the whole batch, with `logits`
// itself, when it fits). With empty `logits` (an executor part that computes none) the pieces
// get empty spans too.
template <typename Run>
Status run_in_pieces(const Batch& batch, int32_t max_rows, int64_t n_vocab, std::span<float> logits,
                     PieceScratch& scratch, Run&& run) {
  if (batch.n_tokens() <= max_rows) return run(batch, logits);
  const auto vocab = static_cast<size_t>(n_vocab);
  for (int32_t first = 0; first < batch.n_tokens(); first += max_rows) {
    const int32_t last = std::min(batch.n_tokens(), first + max_rows);
    Batch& piece = scratch.piece;
    piece.clear();
    piece.tokens.assign(batch.tokens.begin() + first, batch.tokens.begin() + last);
    piece.positions.assign(batch.positions.begin() + first, batch.positions.begin() + last);
    piece.seq_index.assign(batch.seq_index.begin() + first, batch.seq_index.begin() + last);
    piece.block_tables = batch.block_tables;
    piece.blocks_per_seq = batch.blocks_per_seq;
    piece.seq_lengths = batch.seq_lengths;
    scratch.destinations.clear();
    for (size_t i = 0; i < batch.logit_rows.size(); ++i) {
      if (batch.logit_rows[i] >= first && batch.logit_rows[i] < last) {
        piece.logit_rows.push_back(batch.logit_rows[i] - first);
        scratch.destinations.push_back(i);
      }
    }
    std::span<float> piece_logits;
    if (!logits.empty()) {
      scratch.logits.resize(piece.logit_rows.size() * vocab);
      piece_logits = scratch.logits;
    }
    LS_RETURN_IF_ERROR(run(static_cast<const Batch&>(piece), piece_logits));
    for (size_t i = 0; i < scratch.destinations.size() && !logits.empty(); ++i) {
      std::copy_n(scratch.logits.begin() + static_cast<std::ptrdiff_t>(i * vocab), vocab,
                  logits.begin() + static_cast<std::ptrdiff_t>(scratch.destinations[i] * vocab));
    }
  }
  return Status::ok();
}

}  // namespace llamaserve
