#include "executor/batch_validation.h"

#include <cmath>
#include <vector>

namespace llamaserve {

Status validate_batch(const Batch& batch, const KvCacheInfo& kv, int64_t n_vocab,
                      size_t logits_size) {
  const int32_t n = batch.n_tokens();
  const int32_t n_seqs = batch.n_seqs();
  if (n == 0) return make_error(StatusCode::kInvalidArgument, "batch has no tokens");
  if (batch.positions.size() != static_cast<size_t>(n) ||
      batch.seq_index.size() != static_cast<size_t>(n)) {
    return make_error(StatusCode::kInvalidArgument,
                      "batch has {} tokens but {} positions and {} sequence indices", n,
                      batch.positions.size(), batch.seq_index.size());
  }
  if (n_seqs == 0 || batch.blocks_per_seq <= 0 ||
      batch.block_tables.size() !=
          static_cast<size_t>(n_seqs) * static_cast<size_t>(batch.blocks_per_seq)) {
    return make_error(
        StatusCode::kInvalidArgument,
        "batch block tables hold {} entries, expected {} sequences x {} blocks_per_seq",
        batch.block_tables.size(), n_seqs, batch.blocks_per_seq);
  }
  const int64_t max_tokens_per_seq = static_cast<int64_t>(batch.blocks_per_seq) * kv.block_size;
  for (int32_t s = 0; s < n_seqs; ++s) {
    const int32_t length = batch.seq_lengths[s];
    if (length <= 0 || length > max_tokens_per_seq) {
      return make_error(StatusCode::kInvalidArgument, "sequence {} has length {}, outside [1, {}]",
                        s, length, max_tokens_per_seq);
    }
    const int32_t* table = batch.block_table(s);
    const int32_t used_blocks = (length + kv.block_size - 1) / kv.block_size;
    for (int32_t i = 0; i < used_blocks; ++i) {
      if (table[i] < 0 || table[i] >= kv.n_blocks) {
        return make_error(StatusCode::kInvalidArgument,
                          "sequence {}: block table entry {} is {}, outside the cache's {} blocks",
                          s, i, table[i], kv.n_blocks);
      }
    }
  }
  // -1: no row of the sequence seen yet.
  std::vector<int32_t> last_position(static_cast<size_t>(n_seqs), -1);
  for (int32_t t = 0; t < n; ++t) {
    const int32_t token = batch.tokens[t];
    const int32_t seq = batch.seq_index[t];
    const int32_t pos = batch.positions[t];
    if (token < 0 || token >= n_vocab) {
      return make_error(StatusCode::kInvalidArgument,
                        "row {}: token id {} outside the vocabulary [0, {})", t, token, n_vocab);
    }
    if (seq < 0 || seq >= n_seqs) {
      return make_error(StatusCode::kInvalidArgument, "row {}: sequence index {} outside [0, {})",
                        t, seq, n_seqs);
    }
    if (pos < 0 || pos >= batch.seq_lengths[seq]) {
      return make_error(StatusCode::kInvalidArgument,
                        "row {}: position {} outside sequence {}'s length {}", t, pos, seq,
                        batch.seq_lengths[seq]);
    }
    int32_t& last = last_position[static_cast<size_t>(seq)];
    if (last >= 0 && pos != last + 1) {
      return make_error(
          StatusCode::kInvalidArgument,
          "row {}: position {} of sequence {} does not follow its previous row's position {}", t,
          pos, seq, last);
    }
    last = pos;
  }
  for (size_t i = 0; i < batch.logit_rows.size(); ++i) {
    if (batch.logit_rows[i] < 0 || batch.logit_rows[i] >= n) {
      return make_error(StatusCode::kInvalidArgument,
                        "logit row {} is {}, outside the batch's {} rows", i, batch.logit_rows[i],
                        n);
    }
  }
  if (logits_size < batch.logit_rows.size() * static_cast<size_t>(n_vocab)) {
    return make_error(StatusCode::kInvalidArgument,
                      "logits buffer holds {} floats, {} rows x {} needed", logits_size,
                      batch.logit_rows.size(), n_vocab);
  }
  return Status::ok();
}

Status validate_sampling(const Batch& batch, std::span<const RowSampling> sampling,
                         std::span<int32_t> tokens) {
  if (sampling.size() != batch.logit_rows.size() || tokens.size() != batch.logit_rows.size()) {
    return make_error(StatusCode::kInvalidArgument,
                      "{} sampling entries and {} token slots for {} logit rows", sampling.size(),
                      tokens.size(), batch.logit_rows.size());
  }
  for (size_t i = 0; i < sampling.size(); ++i) {
    if (!std::isfinite(sampling[i].temperature) || !std::isfinite(sampling[i].top_p)) {
      return make_error(StatusCode::kInvalidArgument,
                        "sampling of logit row {}: temperature {} and top_p {} must be finite", i,
                        sampling[i].temperature, sampling[i].top_p);
    }
  }
  return Status::ok();
}

Status validate_sampled_batch(const Batch& batch, const KvCacheInfo& kv, int64_t n_vocab,
                              std::span<const RowSampling> sampling, std::span<int32_t> tokens,
                              size_t logits_size) {
  const size_t needed = batch.logit_rows.size() * static_cast<size_t>(n_vocab);
  LS_RETURN_IF_ERROR(validate_batch(batch, kv, n_vocab, logits_size == 0 ? needed : logits_size));
  return validate_sampling(batch, sampling, tokens);
}

Status validate_hidden_batch(const Batch& batch, const KvCacheInfo& kv, int64_t n_vocab,
                             int64_t n_embd, size_t hidden_size) {
  const size_t needed = batch.logit_rows.size() * static_cast<size_t>(n_embd);
  if (hidden_size < needed) {
    return make_error(StatusCode::kInvalidArgument,
                      "hidden-state buffer holds {} floats, {} rows x {} needed", hidden_size,
                      batch.logit_rows.size(), n_embd);
  }
  return validate_batch(batch, kv, n_vocab, batch.logit_rows.size() * static_cast<size_t>(n_vocab));
}

}  // namespace llamaserve
