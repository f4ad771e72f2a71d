// Micro-batches of a pipeline pass: a batch's rows split by whole sequences, so that the
// stages of a layer pipeline can work on different micro-batches at once (stage s on
// micro-batch m while stage s + 1 works on m - 1). Plain arithmetic on Batch, no devices: the
// multi-GPU executor runs the result, the CPU unit tests check it.
//
// Why whole sequences: a micro-batch writes and reads the KV cache of its own sequences only,
// so micro-batches in flight on different stages never touch the same cache rows, and every
// micro-batch of decode rows is itself decode-shaped (one row per sequence; the CUDA part
// replays a graph for it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/batch.h"
#include "executor/batch_pieces.h"

namespace llamaserve {

// Which micro-batch each sequence of a batch goes to.
struct MicroBatchSplit {
  int32_t count = 1;            // micro-batches; 1: the batch runs whole
  std::vector<int32_t> of_seq;  // per sequence of the batch: its micro-batch, -1 if it has no rows
};

// Splits the sequences of `batch` into at most `max_count` micro-batches of consecutive
// sequences (in the order of their first rows), as equal in rows as whole sequences allow,
// each of at least `min_rows` rows (a smaller one joins its smaller neighbour). The count is
// also capped by the sequences that have rows and by n_tokens / min_rows; below 2 it is 1.
// PRECONDITION: batch.seq_index entries are in [0, n_seqs) (validate_batch); max_count >= 1,
// min_rows >= 1.
MicroBatchSplit plan_micro_batches(const Batch& batch, int32_t max_count, int32_t min_rows);

// One pass of the pipeline: rows of one micro-batch (all of it, or a piece of at most max_rows
// rows of a larger one), as a Batch of its own.
struct MicroBatch {
  // Its rows in the order of the whole batch; its sequences renumbered 0.. in the order of
  // their first rows, each with its block table row and length from the whole batch; its logit
  // rows in the order of the whole batch's.
  Batch batch;
  // For each logit row of `batch`: its index in the whole batch's logit_rows, i.e. the row of
  // the pass's logits / sampling parameters / tokens it stands for.
  std::vector<size_t> outputs;
  int32_t micro_batch = 0;  // which micro-batch of the split it is a piece of

  // Whether `outputs` is one run of consecutive indices (the usual case: rows grouped by
  // sequence and logit rows in row order), so that its logits and tokens can be written in
  // place.
  bool contiguous_outputs() const;
};

// The passes of `split`: micro-batch 0's rows in pieces of at most max_rows rows, then
// micro-batch 1's, and so on. Fills units[0, returned count), reusing the vectors `units`
// already holds; entries past the count are left as they were.
// PRECONDITION: split is plan_micro_batches(batch, ...); max_rows >= 1.
size_t build_micro_batches(const Batch& batch, const MicroBatchSplit& split, int32_t max_rows,
                           std::vector<MicroBatch>& units);

// Where one micro-batch's pass writes its outputs: straight into its rows of the whole pass's
// outputs where they are consecutive, otherwise into the vectors here (its sampling
// parameters gathered), which scatter() copies to their rows once the pass is done.
struct MicroBatchOutputs {
  PassOutputs out;  // what the micro-batch's pass gets
  bool in_place = true;
  std::vector<float> logits;
  std::vector<RowSampling> sampling;
  std::vector<int32_t> tokens;

  // PRECONDITION: `pass` has the whole batch's outputs (PassOutputs), n_vocab floats per row.
  void prepare(const MicroBatch& unit, const PassOutputs& pass, int64_t n_vocab);
  // PRECONDITION: prepare(unit, pass, n_vocab) came before, and then the micro-batch's pass.
  void scatter(const MicroBatch& unit, const PassOutputs& pass) const;
};

}  // namespace llamaserve
