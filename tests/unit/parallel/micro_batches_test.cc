// Micro-batches of a pipeline pass: which sequences go to which micro-batch (whole sequences,
// consecutive, balanced by rows, none below the minimum), and the passes built from them
// (every row once, in the batch's order, sequences renumbered with their block tables, decode
// rows still one per sequence, logit rows routed back to their outputs).
#include "parallel/micro_batches.h"

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

#include <gtest/gtest.h>

namespace llamaserve {
namespace {

constexpr int32_t kBlocksPerSeq = 4;

// Sequence s owns blocks [10 s, 10 s + kBlocksPerSeq); `rows` lists (sequence, row count) in
// batch order, positions continuing per sequence from 100 s; logits for every row.
Batch make_batch(int32_t n_seqs, const std::vector<std::pair<int32_t, int32_t>>& rows) {
  Batch b;
  b.blocks_per_seq = kBlocksPerSeq;
  b.seq_lengths.assign(static_cast<size_t>(n_seqs), 0);
  for (int32_t s = 0; s < n_seqs; ++s) {
    for (int32_t i = 0; i < kBlocksPerSeq; ++i) b.block_tables.push_back(10 * s + i);
  }
  std::vector<int32_t> next(static_cast<size_t>(n_seqs), 0);
  for (const auto& [s, count] : rows) {
    for (int32_t i = 0; i < count; ++i) {
      b.tokens.push_back(1000 * s + b.n_tokens());
      b.positions.push_back(next[static_cast<size_t>(s)]++);
      b.seq_index.push_back(s);
    }
    b.seq_lengths[static_cast<size_t>(s)] = next[static_cast<size_t>(s)];
  }
  for (int32_t r = 0; r < b.n_tokens(); ++r) b.logit_rows.push_back(r);
  return b;
}

std::vector<int32_t> rows_per_micro_batch(const Batch& batch, const MicroBatchSplit& split) {
  std::vector<int32_t> rows(static_cast<size_t>(split.count), 0);
  for (const int32_t s : batch.seq_index) ++rows[static_cast<size_t>(split.of_seq[s])];
  return rows;
}

TEST(MicroBatchesTest, DecodeRowsSplitIntoConsecutiveSequences) {
  const Batch batch = make_batch(6, {{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}});
  const MicroBatchSplit split = plan_micro_batches(batch, 2, 1);
  EXPECT_EQ(split.count, 2);
  EXPECT_EQ(split.of_seq, (std::vector<int32_t>{0, 0, 0, 1, 1, 1}));
  const MicroBatchSplit three = plan_micro_batches(batch, 3, 1);
  EXPECT_EQ(three.of_seq, (std::vector<int32_t>{0, 0, 1, 1, 2, 2}));

  std::vector<MicroBatch> units;
  ASSERT_EQ(build_micro_batches(batch, split, 64, units), 2u);
  for (size_t u = 0; u < 2; ++u) {
    const Batch& b = units[u].batch;
    // Still decode-shaped: one row per sequence, logits for every row.
    EXPECT_EQ(b.n_tokens(), 3);
    EXPECT_EQ(b.n_seqs(), 3);
    EXPECT_EQ(b.seq_index, (std::vector<int32_t>{0, 1, 2}));
    EXPECT_EQ(b.logit_rows, (std::vector<int32_t>{0, 1, 2}));
    EXPECT_EQ(units[u].micro_batch, static_cast<int32_t>(u));
    EXPECT_EQ(units[u].outputs, (std::vector<size_t>{3 * u, 3 * u + 1, 3 * u + 2}));
    EXPECT_TRUE(units[u].contiguous_outputs());
    for (int32_t s = 0; s < 3; ++s) {
      const int32_t original = static_cast<int32_t>(3 * u) + s;
      EXPECT_EQ(b.block_table(s)[0], 10 * original);
      EXPECT_EQ(b.block_table(s)[kBlocksPerSeq - 1], 10 * original + kBlocksPerSeq - 1);
      EXPECT_EQ(b.seq_lengths[static_cast<size_t>(s)], 1);
    }
  }
}

TEST(MicroBatchesTest, BoundariesBalanceRows) {
  // 80 rows: 10 + 30 = 40 | 5 + 5 + 20 + 10 = 40.
  const Batch batch = make_batch(6, {{0, 10}, {1, 30}, {2, 5}, {3, 5}, {4, 20}, {5, 10}});
  const MicroBatchSplit split = plan_micro_batches(batch, 2, 1);
  EXPECT_EQ(split.of_seq, (std::vector<int32_t>{0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(rows_per_micro_batch(batch, split), (std::vector<int32_t>{40, 40}));
  // Thirds: the rows so far closest to 26.7 and 53.3 are 40 and 50: 10 + 30 | 5 + 5 | 20 + 10.
  const MicroBatchSplit three = plan_micro_batches(batch, 3, 1);
  EXPECT_EQ(rows_per_micro_batch(batch, three), (std::vector<int32_t>{40, 10, 30}));
}

TEST(MicroBatchesTest, CountIsCappedBySequencesAndRows) {
  const Batch two = make_batch(2, {{0, 50}, {1, 50}});
  EXPECT_EQ(plan_micro_batches(two, 4, 1).count, 2);  // two sequences
  EXPECT_EQ(plan_micro_batches(two, 4, 40).count, 2);
  EXPECT_EQ(plan_micro_batches(two, 4, 51).count, 1);  // 100 / 51 rows
  const Batch one = make_batch(1, {{0, 300}});
  const MicroBatchSplit whole = plan_micro_batches(one, 4, 1);
  EXPECT_EQ(whole.count, 1);
  EXPECT_EQ(whole.of_seq, (std::vector<int32_t>{0}));
  // 8 decode rows with 4 rows at least: two micro-batches, not four.
  const Batch decode =
      make_batch(8, {{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1}, {7, 1}});
  EXPECT_EQ(plan_micro_batches(decode, 4, 4).count, 2);
  EXPECT_EQ(plan_micro_batches(decode, 4, 9).count, 1);
  EXPECT_EQ(plan_micro_batches(decode, 1, 1).count, 1);
}

TEST(MicroBatchesTest, SmallMicroBatchesJoinANeighbour) {
  // One long prefill and three decode rows: 100 | 3 has a micro-batch below 4 rows.
  const Batch batch = make_batch(4, {{0, 100}, {1, 1}, {2, 1}, {3, 1}});
  EXPECT_EQ(plan_micro_batches(batch, 2, 1).count, 2);
  const MicroBatchSplit merged = plan_micro_batches(batch, 2, 4);
  EXPECT_EQ(merged.count, 1);
  EXPECT_EQ(merged.of_seq, (std::vector<int32_t>{0, 0, 0, 0}));
  // 30 | 30 | 2 with at least 10 rows: the 2 joins its (only) neighbour.
  const Batch three = make_batch(3, {{0, 30}, {1, 30}, {2, 2}});
  const MicroBatchSplit split = plan_micro_batches(three, 3, 10);
  EXPECT_EQ(split.count, 2);
  EXPECT_EQ(split.of_seq, (std::vector<int32_t>{0, 1, 1}));
}

TEST(MicroBatchesTest, SequencesWithoutRowsAreLeftOut) {
  const Batch batch = make_batch(5, {{3, 2}, {0, 2}, {4, 2}});
  const MicroBatchSplit split = plan_micro_batches(batch, 3, 1);
  EXPECT_EQ(split.count, 3);
  // In the order of their first rows: 3, 0, 4.
  EXPECT_EQ(split.of_seq, (std::vector<int32_t>{1, -1, -1, 0, 2}));
  std::vector<MicroBatch> units;
  ASSERT_EQ(build_micro_batches(batch, split, 64, units), 3u);
  EXPECT_EQ(units[0].batch.n_seqs(), 1);
  EXPECT_EQ(units[0].batch.block_table(0)[0], 30);
  EXPECT_EQ(units[1].batch.block_table(0)[0], 0);
  EXPECT_EQ(units[2].batch.block_table(0)[0], 40);
}

TEST(MicroBatchesTest, LargeMicroBatchesRunInPiecesInRowOrder) {
  // 50 + 50 rows in two micro-batches, pieces of at most 20 rows: 20 20 10 | 20 20 10.
  const Batch batch = make_batch(4, {{0, 30}, {1, 20}, {2, 25}, {3, 25}});
  const MicroBatchSplit split = plan_micro_batches(batch, 2, 1);
  ASSERT_EQ(split.count, 2);
  std::vector<MicroBatch> units;
  const size_t n = build_micro_batches(batch, split, 20, units);
  ASSERT_EQ(n, 6u);
  std::vector<int32_t> sizes, groups;
  for (size_t u = 0; u < n; ++u) {
    sizes.push_back(units[u].batch.n_tokens());
    groups.push_back(units[u].micro_batch);
  }
  EXPECT_EQ(sizes, (std::vector<int32_t>{20, 20, 10, 20, 20, 10}));
  EXPECT_EQ(groups, (std::vector<int32_t>{0, 0, 0, 1, 1, 1}));
  // The second piece holds rows 20..39: the end of sequence 0 and the start of sequence 1.
  const Batch& second = units[1].batch;
  EXPECT_EQ(second.n_seqs(), 2);
  EXPECT_EQ(second.positions.front(), 20);
  EXPECT_EQ(second.seq_index.front(), 0);
  EXPECT_EQ(second.seq_index.back(), 1);
  EXPECT_EQ(second.block_table(0)[0], 0);
  EXPECT_EQ(second.block_table(1)[0], 10);
  // Lengths are the whole batch's (what run_in_pieces passes too).
  EXPECT_EQ(second.seq_lengths, (std::vector<int32_t>{30, 20}));
}

// Logit rows listed out of order, and sequences whose rows interleave: each output goes back to
// its index of the whole batch's logit_rows.
TEST(MicroBatchesTest, LogitRowsKeepTheirOutputs) {
  Batch batch = make_batch(4, {{0, 1}, {2, 1}, {1, 1}, {3, 1}, {0, 1}, {2, 1}});
  batch.logit_rows = {5, 0, 3, 2};
  const MicroBatchSplit split = plan_micro_batches(batch, 2, 1);
  // First rows: 0, 2, 1, 3 -> {0, 2} | {1, 3}.
  EXPECT_EQ(split.of_seq, (std::vector<int32_t>{0, 1, 0, 1}));
  std::vector<MicroBatch> units;
  ASSERT_EQ(build_micro_batches(batch, split, 64, units), 2u);
  // Micro-batch 0: rows 0, 1, 4, 5 of the batch; logit rows 5 (output 0) and 0 (output 1).
  EXPECT_EQ(units[0].batch.tokens, (std::vector<int32_t>{0, 2001, 4, 2005}));
  EXPECT_EQ(units[0].batch.seq_index, (std::vector<int32_t>{0, 1, 0, 1}));
  EXPECT_EQ(units[0].batch.positions, (std::vector<int32_t>{0, 0, 1, 1}));
  EXPECT_EQ(units[0].batch.logit_rows, (std::vector<int32_t>{3, 0}));
  EXPECT_EQ(units[0].outputs, (std::vector<size_t>{0, 1}));
  EXPECT_TRUE(units[0].contiguous_outputs());
  // Micro-batch 1: rows 2, 3; logit rows 3 (output 2) and 2 (output 3).
  EXPECT_EQ(units[1].batch.tokens, (std::vector<int32_t>{1002, 3003}));
  EXPECT_EQ(units[1].batch.logit_rows, (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(units[1].outputs, (std::vector<size_t>{2, 3}));

  batch.logit_rows = {0, 2, 4};
  ASSERT_EQ(build_micro_batches(batch, split, 64, units), 2u);
  EXPECT_EQ(units[0].outputs, (std::vector<size_t>{0, 2}));
  EXPECT_FALSE(units[0].contiguous_outputs());
  EXPECT_EQ(units[1].outputs, (std::vector<size_t>{1}));
}

// What each micro-batch's pass writes lands in the rows of the whole pass, in place where its
// outputs are consecutive, scattered otherwise; its sampling parameters are its rows'.
TEST(MicroBatchesTest, OutputsGoToTheirRows) {
  Batch batch = make_batch(4, {{0, 1}, {2, 1}, {1, 1}, {3, 1}});
  // Micro-batch {0, 2} (rows 0, 1) has outputs 0 and 3, micro-batch {1, 3} outputs 1 and 2.
  batch.logit_rows = {0, 2, 3, 1};
  const MicroBatchSplit split = plan_micro_batches(batch, 2, 1);
  std::vector<MicroBatch> units;
  ASSERT_EQ(build_micro_batches(batch, split, 64, units), 2u);
  constexpr int64_t kVocab = 3;
  std::vector<float> logits(4 * kVocab, -1.0f);
  std::vector<RowSampling> sampling(4);
  for (size_t i = 0; i < 4; ++i) sampling[i].seed = 100 + i;
  std::vector<int32_t> tokens(4, -1);
  const PassOutputs pass{logits, sampling, tokens};
  std::vector<MicroBatchOutputs> outs(2);
  for (size_t u = 0; u < 2; ++u) {
    outs[u].prepare(units[u], pass, kVocab);
    const PassOutputs& o = outs[u].out;
    ASSERT_EQ(o.tokens.size(), units[u].outputs.size());
    ASSERT_EQ(o.logits.size(), units[u].outputs.size() * kVocab);
    for (size_t i = 0; i < o.tokens.size(); ++i) {
      // The batch row of this logit row tells what to write; its seed says it is its row's.
      const int32_t row = batch.logit_rows[units[u].outputs[i]];
      EXPECT_EQ(o.sampling[i].seed, 100 + units[u].outputs[i]);
      o.tokens[i] = 50 + row;
      for (int64_t v = 0; v < kVocab; ++v) o.logits[i * kVocab + v] = 10.0f * row + v;
    }
  }
  EXPECT_FALSE(outs[0].in_place);
  EXPECT_TRUE(outs[1].in_place);
  EXPECT_EQ(outs[1].out.tokens.data(), tokens.data() + 1);
  EXPECT_EQ(outs[1].out.logits.data(), logits.data() + kVocab);
  for (size_t u = 0; u < 2; ++u) outs[u].scatter(units[u], pass);
  for (size_t i = 0; i < 4; ++i) {
    const int32_t row = batch.logit_rows[i];
    EXPECT_EQ(tokens[i], 50 + row) << i;
    for (int64_t v = 0; v < kVocab; ++v) EXPECT_EQ(logits[i * kVocab + v], 10.0f * row + v);
  }

  // Without sampling and logits nothing is written anywhere.
  MicroBatchOutputs none;
  none.prepare(units[0], PassOutputs{}, kVocab);
  EXPECT_TRUE(none.out.logits.empty());
  EXPECT_TRUE(none.out.tokens.empty());
  none.scatter(units[0], PassOutputs{});
}

// Random batches: every row in exactly one pass, in the batch's order, with its token,
// position and sequence (by block table); all rows of a sequence in one micro-batch; every
// output once; no pass above max_rows; no micro-batch below min_rows unless there is one.
TEST(MicroBatchesTest, RandomBatchesKeepEveryRow) {
  std::mt19937 rng(7);
  std::vector<MicroBatch> units;
  for (int trial = 0; trial < 300; ++trial) {
    const int32_t n_seqs = 1 + static_cast<int32_t>(rng() % 12);
    std::vector<std::pair<int32_t, int32_t>> rows;
    const int n_runs = 1 + static_cast<int>(rng() % 20);
    for (int i = 0; i < n_runs; ++i) {
      rows.emplace_back(static_cast<int32_t>(rng() % n_seqs),
                        1 + static_cast<int32_t>(rng() % (rng() % 2 ? 3 : 40)));
    }
    Batch batch = make_batch(n_seqs, rows);
    batch.logit_rows.clear();
    for (int32_t r = 0; r < batch.n_tokens(); ++r) {
      if (rng() % 3 == 0) batch.logit_rows.push_back(r);
    }
    std::shuffle(batch.logit_rows.begin(), batch.logit_rows.end(), rng);
    const int32_t max_count = 1 + static_cast<int32_t>(rng() % 4);
    const int32_t min_rows = 1 + static_cast<int32_t>(rng() % 16);
    const int32_t max_rows = 1 + static_cast<int32_t>(rng() % 64);
    const MicroBatchSplit split = plan_micro_batches(batch, max_count, min_rows);
    ASSERT_GE(split.count, 1);
    ASSERT_LE(split.count, max_count);
    if (split.count > 1) {
      for (const int32_t r : rows_per_micro_batch(batch, split)) EXPECT_GE(r, min_rows);
    }
    for (int32_t s = 0; s < n_seqs; ++s) {
      const bool has_rows =
          std::find(batch.seq_index.begin(), batch.seq_index.end(), s) != batch.seq_index.end();
      EXPECT_EQ(split.of_seq[static_cast<size_t>(s)] >= 0, has_rows);
    }
    const size_t n = build_micro_batches(batch, split, max_rows, units);
    std::map<int32_t, int32_t> batch_row_of_token;  // (tokens are unique)
    for (int32_t r = 0; r < batch.n_tokens(); ++r) batch_row_of_token[batch.tokens[r]] = r;
    std::vector<int32_t> seen_rows;
    std::map<int32_t, int32_t> last_row_of_group;
    std::multiset<size_t> outputs;
    int32_t last_group = 0;
    for (size_t u = 0; u < n; ++u) {
      const MicroBatch& unit = units[u];
      const Batch& b = unit.batch;
      ASSERT_LE(b.n_tokens(), max_rows);
      ASSERT_GT(b.n_tokens(), 0);
      EXPECT_GE(unit.micro_batch, last_group);
      last_group = unit.micro_batch;
      for (int32_t r = 0; r < b.n_tokens(); ++r) {
        const int32_t row = batch_row_of_token.at(b.tokens[r]);
        const int32_t seq = batch.seq_index[row];
        seen_rows.push_back(row);
        const auto last = last_row_of_group.find(unit.micro_batch);
        if (last != last_row_of_group.end()) {
          EXPECT_GT(row, last->second);
        }
        last_row_of_group[unit.micro_batch] = row;
        EXPECT_EQ(b.positions[r], batch.positions[row]);
        EXPECT_EQ(split.of_seq[seq], unit.micro_batch);
        EXPECT_EQ(b.block_table(b.seq_index[r])[0], 10 * seq);
        EXPECT_EQ(b.seq_lengths[b.seq_index[r]], batch.seq_lengths[seq]);
      }
      ASSERT_EQ(b.logit_rows.size(), unit.outputs.size());
      for (size_t i = 0; i < unit.outputs.size(); ++i) {
        outputs.insert(unit.outputs[i]);
        EXPECT_EQ(b.tokens[b.logit_rows[i]], batch.tokens[batch.logit_rows[unit.outputs[i]]]);
      }
    }
    // Every row once; within a micro-batch in the batch's order.
    std::vector<int32_t> sorted = seen_rows;
    std::sort(sorted.begin(), sorted.end());
    for (int32_t r = 0; r < batch.n_tokens(); ++r) ASSERT_EQ(sorted[r], r);
    if (split.count == 1) {
      EXPECT_EQ(seen_rows, sorted);
    }
    EXPECT_EQ(outputs.size(), batch.logit_rows.size());
    for (size_t i = 0; i < batch.logit_rows.size(); ++i) EXPECT_EQ(outputs.count(i), 1u);
  }
}

}  // namespace
}  // namespace llamaserve
