// Checks a Batch against the cache geometry and the model before any kernel reads it, so
// that an engine bug shows up as a Status naming the bad row instead of a wild read.
#pragma once

#include <cstdint>
#include <span>

#include "backend/batch.h"
#include "core/status.h"

namespace llamaserve {

// Verifies: array sizes agree; token ids in [0, n_vocab); sequence indices in range;
// positions of each sequence consecutive in row order and below its seq_length; every block
// a row's attention reads is a valid block id; logit rows in range; `logits_size` floats are
// enough for logit_rows.size() rows of n_vocab.
Status validate_batch(const Batch& batch, const KvCacheInfo& kv, int64_t n_vocab,
                      size_t logits_size);

// Verifies the arguments of Executor::forward_sampled beyond validate_batch: one sampling
// entry and one token slot per logit row, and parameters a kernel can use (finite
// temperature and top_p).
Status validate_sampling(const Batch& batch, std::span<const RowSampling> sampling,
                         std::span<int32_t> tokens);

// Both, for Executor::forward_sampled, whose logits are optional: logits_size 0 means none are
// wanted.
Status validate_sampled_batch(const Batch& batch, const KvCacheInfo& kv, int64_t n_vocab,
                              std::span<const RowSampling> sampling, std::span<int32_t> tokens,
                              size_t logits_size);

// validate_batch for Executor::forward_hidden: `hidden_size` floats are enough for
// logit_rows.size() rows of n_embd (no logits are written).
Status validate_hidden_batch(const Batch& batch, const KvCacheInfo& kv, int64_t n_vocab,
                             int64_t n_embd, size_t hidden_size);

}  // namespace llamaserve
