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

// What a pass returns per logit row: logits (empty: none, as for an executor part that
// computes none), and tokens drawn on the device with their sampling parameters (both empty:
// none drawn).
struct PassOutputs {
  std::span<float> logits;
  std::span<const RowSampling> sampling;
  std::span<int32_t> tokens;
};

// Reused between calls so that steady-state passes allocate nothing.
struct PieceScratch {
  Batch piece;
  std::vector<size_t> destinations;  // row of the batch's outputs for each logit row of the piece
  std::vector<float> logits;
  std::vector<RowSampling> sampling;
  std::vector<int32_t> tokens;
};

// Calls run(piece, piece_outputs) -> Status for each piece (the whole batch, with `out`
// itself, when it fits), and scatters each piece's outputs to their rows of `out`.
template <typename Run>
Status run_in_pieces(const Batch& batch, int32_t max_rows, int64_t n_vocab, const PassOutputs& out,
                     PieceScratch& scratch, Run&& run) {
  if (batch.n_tokens() <= max_rows) return run(batch, out);
  const auto vocab = static_cast<size_t>(n_vocab);
  const bool sampled = !out.sampling.empty();
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
    scratch.sampling.clear();
    for (size_t i = 0; i < batch.logit_rows.size(); ++i) {
      if (batch.logit_rows[i] >= first && batch.logit_rows[i] < last) {
        piece.logit_rows.push_back(batch.logit_rows[i] - first);
        scratch.destinations.push_back(i);
        if (sampled) scratch.sampling.push_back(out.sampling[i]);
      }
    }
    PassOutputs piece_out;
    if (!out.logits.empty()) {
      scratch.logits.resize(piece.logit_rows.size() * vocab);
      piece_out.logits = scratch.logits;
    }
    if (sampled) {
      scratch.tokens.resize(piece.logit_rows.size());
      piece_out.sampling = scratch.sampling;
      piece_out.tokens = scratch.tokens;
    }
    LS_RETURN_IF_ERROR(run(static_cast<const Batch&>(piece), piece_out));
    for (size_t i = 0; i < scratch.destinations.size(); ++i) {
      const size_t row = scratch.destinations[i];
      if (!out.logits.empty()) {
        std::copy_n(scratch.logits.begin() + static_cast<std::ptrdiff_t>(i * vocab), vocab,
                    out.logits.begin() + static_cast<std::ptrdiff_t>(row * vocab));
      }
      if (sampled) out.tokens[row] = scratch.tokens[i];
    }
  }
  return Status::ok();
}

// run_in_pieces for logits only: run(piece, piece_logits).
template <typename Run>
Status run_in_pieces(const Batch& batch, int32_t max_rows, int64_t n_vocab, std::span<float> logits,
                     PieceScratch& scratch, Run&& run) {
  return run_in_pieces(batch, max_rows, n_vocab, PassOutputs{logits, {}, {}}, scratch,
                       [&](const Batch& piece, const PassOutputs& piece_out) {
                         return run(piece, piece_out.logits);
                       });
}

}  // namespace llamaserve
