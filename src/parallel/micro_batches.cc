#include "parallel/micro_batches.h"

#include <algorithm>
#include <cstdlib>

namespace llamaserve {
namespace {

// Merges micro-batch `from` into `into` (a neighbour) and renumbers the ones after `from`.
void merge_into(MicroBatchSplit& split, std::vector<int64_t>& rows, int32_t from, int32_t into) {
  for (int32_t& m : split.of_seq) {
    if (m == from) m = into;
    if (m > from) --m;
  }
  rows[static_cast<size_t>(into)] += rows[static_cast<size_t>(from)];
  rows.erase(rows.begin() + from);
  --split.count;
}

}  // namespace

MicroBatchSplit plan_micro_batches(const Batch& batch, int32_t max_count, int32_t min_rows) {
  MicroBatchSplit split;
  const size_t n_seqs = static_cast<size_t>(batch.n_seqs());
  split.of_seq.assign(n_seqs, -1);
  // Rows per sequence, and the sequences in the order of their first rows.
  std::vector<int64_t> seq_rows(n_seqs, 0);
  std::vector<int32_t> order;
  for (const int32_t s : batch.seq_index) {
    if (seq_rows[static_cast<size_t>(s)]++ == 0) order.push_back(s);
  }
  const int64_t total = batch.n_tokens();
  const int64_t count = std::min<int64_t>(
      {max_count, static_cast<int64_t>(order.size()), total / std::max(min_rows, 1)});
  if (count < 2) {
    for (const int32_t s : order) split.of_seq[static_cast<size_t>(s)] = 0;
    return split;
  }

  // Consecutive sequences per micro-batch, each boundary where the rows so far come closest
  // to its share of the total (k + 1) / count, keeping a sequence for every later micro-batch.
  std::vector<int64_t> rows(static_cast<size_t>(count), 0);
  int64_t k = 0, assigned = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const int32_t s = order[i];
    const int64_t r = seq_rows[static_cast<size_t>(s)];
    if (k < count - 1 && rows[static_cast<size_t>(k)] > 0) {
      const int64_t left = static_cast<int64_t>(order.size() - i);  // s included
      const int64_t target = total * (k + 1);                       // in units of 1 / count
      const bool must_close = left == count - 1 - k;
      if (must_close ||
          std::llabs((assigned + r) * count - target) > std::llabs(assigned * count - target)) {
        ++k;
      }
    }
    split.of_seq[static_cast<size_t>(s)] = static_cast<int32_t>(k);
    rows[static_cast<size_t>(k)] += r;
    assigned += r;
  }
  split.count = static_cast<int32_t>(count);

  // A micro-batch below min_rows joins its smaller neighbour, smallest first.
  while (split.count > 1) {
    const auto smallest = std::min_element(rows.begin(), rows.end());
    if (*smallest >= min_rows) break;
    const int32_t j = static_cast<int32_t>(smallest - rows.begin());
    int32_t into = j - 1;
    if (j == 0 || (j + 1 < split.count &&
                   rows[static_cast<size_t>(j + 1)] < rows[static_cast<size_t>(j - 1)])) {
      into = j + 1;
    }
    merge_into(split, rows, j, into);
  }
  return split;
}

bool MicroBatch::contiguous_outputs() const {
  for (size_t i = 1; i < outputs.size(); ++i) {
    if (outputs[i] != outputs[0] + i) return false;
  }
  return true;
}

size_t build_micro_batches(const Batch& batch, const MicroBatchSplit& split, int32_t max_rows,
                           std::vector<MicroBatch>& units) {
  const int32_t n_rows = batch.n_tokens();
  const size_t n_seqs = static_cast<size_t>(batch.n_seqs());
  const size_t stride = static_cast<size_t>(batch.blocks_per_seq);
  // Per row of the batch: its unit and its row there (to route the logit rows).
  std::vector<int32_t> row_unit(static_cast<size_t>(n_rows), -1), row_local(row_unit.size(), -1);
  std::vector<int32_t> local_seq(n_seqs, -1);
  size_t n_units = 0;
  for (int32_t m = 0; m < split.count; ++m) {
    MicroBatch* unit = nullptr;
    for (int32_t r = 0; r < n_rows; ++r) {
      const int32_t s = batch.seq_index[static_cast<size_t>(r)];
      if (split.of_seq[static_cast<size_t>(s)] != m) continue;
      if (unit == nullptr || unit->batch.n_tokens() == max_rows) {
        if (units.size() == n_units) units.emplace_back();
        unit = &units[n_units++];
        unit->batch.clear();
        unit->batch.blocks_per_seq = batch.blocks_per_seq;
        unit->outputs.clear();
        unit->micro_batch = m;
        std::fill(local_seq.begin(), local_seq.end(), -1);
      }
      Batch& b = unit->batch;
      int32_t& local = local_seq[static_cast<size_t>(s)];
      if (local < 0) {
        local = b.n_seqs();
        const auto table = batch.block_tables.begin() + static_cast<std::ptrdiff_t>(s * stride);
        b.block_tables.insert(b.block_tables.end(), table,
                              table + static_cast<std::ptrdiff_t>(stride));
        b.seq_lengths.push_back(batch.seq_lengths[static_cast<size_t>(s)]);
      }
      row_unit[static_cast<size_t>(r)] = static_cast<int32_t>(n_units - 1);
      row_local[static_cast<size_t>(r)] = b.n_tokens();
      b.tokens.push_back(batch.tokens[static_cast<size_t>(r)]);
      b.positions.push_back(batch.positions[static_cast<size_t>(r)]);
      b.seq_index.push_back(local);
    }
  }
  for (size_t i = 0; i < batch.logit_rows.size(); ++i) {
    const size_t r = static_cast<size_t>(batch.logit_rows[i]);
    MicroBatch& unit = units[static_cast<size_t>(row_unit[r])];
    unit.batch.logit_rows.push_back(row_local[r]);
    unit.outputs.push_back(i);
  }
  return n_units;
}

void MicroBatchOutputs::prepare(const MicroBatch& unit, const PassOutputs& pass, int64_t n_vocab) {
  const size_t vocab = static_cast<size_t>(n_vocab);
  const size_t n = unit.outputs.size(), first = n > 0 ? unit.outputs.front() : 0;
  const bool sampled = !pass.sampling.empty();
  out = PassOutputs{};
  in_place = unit.contiguous_outputs();
  if (in_place) {
    if (!pass.logits.empty()) out.logits = pass.logits.subspan(first * vocab, n * vocab);
    if (sampled) {
      out.sampling = pass.sampling.subspan(first, n);
      out.tokens = pass.tokens.subspan(first, n);
    }
    return;
  }
  if (!pass.logits.empty()) {
    logits.resize(n * vocab);
    out.logits = logits;
  }
  if (sampled) {
    sampling.clear();
    for (const size_t i : unit.outputs) sampling.push_back(pass.sampling[i]);
    tokens.resize(n);
    out.sampling = sampling;
    out.tokens = tokens;
  }
}

void MicroBatchOutputs::scatter(const MicroBatch& unit, const PassOutputs& pass) const {
  if (in_place) return;
  const size_t n = unit.outputs.size();
  const size_t vocab = n > 0 ? out.logits.size() / n : 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t row = unit.outputs[i];
    if (!out.logits.empty()) {
      std::copy_n(logits.begin() + static_cast<std::ptrdiff_t>(i * vocab), vocab,
                  pass.logits.begin() + static_cast<std::ptrdiff_t>(row * vocab));
    }
    if (!out.tokens.empty()) pass.tokens[row] = tokens[i];
  }
}

}  // namespace llamaserve
