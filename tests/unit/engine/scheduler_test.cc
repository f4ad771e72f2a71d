#include "engine/scheduler.h"

#include <map>
#include <random>

#include <gtest/gtest.h>

namespace llamaserve {
namespace {

std::unique_ptr<Sequence> make_seq(SeqId id, int32_t n_prompt) {
  auto seq = std::make_unique<Sequence>();
  seq->id = id;
  for (int32_t i = 0; i < n_prompt; ++i) seq->tokens.push_back(static_cast<int32_t>(id * 1000 + i));
  seq->n_prompt = n_prompt;
  return seq;
}

// Plays the engine's part after a forward pass: every chunk that wanted logits gets one new
// token.
void finish_step(Scheduler& scheduler, const StepPlan& plan) {
  scheduler.complete(plan);
  for (const ScheduledChunk& chunk : plan.chunks) {
    if (chunk.wants_logits) chunk.seq->tokens.push_back(7);
  }
}

const ScheduledChunk* chunk_of(const StepPlan& plan, SeqId id) {
  for (const ScheduledChunk& chunk : plan.chunks) {
    if (chunk.seq->id == id) return &chunk;
  }
  return nullptr;
}

TEST(SchedulerTest, AdmitsFifoWithinTheTokenBudget) {
  BlockManager blocks(64, 4);
  Scheduler scheduler({/*max_running=*/8, /*max_batch_tokens=*/16}, blocks);
  scheduler.add(make_seq(1, 10));
  scheduler.add(make_seq(2, 10));
  scheduler.add(make_seq(3, 10));

  StepPlan plan = scheduler.schedule();
  ASSERT_EQ(plan.chunks.size(), 2u);
  EXPECT_EQ(plan.chunks[0].seq->id, 1u);
  EXPECT_EQ(plan.chunks[0].n_tokens, 10);
  EXPECT_TRUE(plan.chunks[0].wants_logits);
  EXPECT_EQ(plan.chunks[1].seq->id, 2u);
  EXPECT_EQ(plan.chunks[1].n_tokens, 6);  // the rest of the budget: a partial prefill
  EXPECT_FALSE(plan.chunks[1].wants_logits);
  EXPECT_EQ(plan.n_tokens, 16);
  EXPECT_EQ(plan.first_admitted.size(), 2u);
  EXPECT_EQ(scheduler.n_running(), 2);
  EXPECT_EQ(scheduler.n_waiting(), 1);
  finish_step(scheduler, plan);

  // Decode of 1 first, then the rest of 2's prompt, then 3 gets what is left.
  plan = scheduler.schedule();
  ASSERT_EQ(plan.chunks.size(), 3u);
  EXPECT_EQ(plan.chunks[0].seq->id, 1u);
  EXPECT_EQ(plan.chunks[0].n_tokens, 1);
  EXPECT_EQ(plan.chunks[1].seq->id, 2u);
  EXPECT_EQ(plan.chunks[1].n_tokens, 4);
  EXPECT_TRUE(plan.chunks[1].wants_logits);
  EXPECT_EQ(plan.chunks[2].seq->id, 3u);
  EXPECT_EQ(plan.chunks[2].n_tokens, 10);
  EXPECT_EQ(plan.n_tokens, 15);
}

TEST(SchedulerTest, ChunksALongPromptAcrossSteps) {
  BlockManager blocks(64, 4);
  Scheduler scheduler({8, 16}, blocks);
  scheduler.add(make_seq(1, 40));
  std::vector<int32_t> chunk_sizes;
  std::vector<bool> logits;
  for (int step = 0; step < 4; ++step) {
    StepPlan plan = scheduler.schedule();
    ASSERT_EQ(plan.chunks.size(), 1u);
    chunk_sizes.push_back(plan.chunks[0].n_tokens);
    logits.push_back(plan.chunks[0].wants_logits);
    finish_step(scheduler, plan);
  }
  EXPECT_EQ(chunk_sizes, (std::vector<int32_t>{16, 16, 8, 1}));
  EXPECT_EQ(logits, (std::vector<bool>{false, false, true, true}));
  EXPECT_EQ(blocks.block_table(1).size(), 11u);  // 41 tokens in blocks of 4
}

TEST(SchedulerTest, DecodesKeepFlowingDuringALongPrefill) {
  BlockManager blocks(64, 4);
  Scheduler scheduler({8, 8}, blocks);
  scheduler.add(make_seq(1, 3));
  StepPlan plan = scheduler.schedule();
  finish_step(scheduler, plan);
  scheduler.add(make_seq(2, 30));
  for (int step = 0; step < 4; ++step) {
    plan = scheduler.schedule();
    const ScheduledChunk* decode = chunk_of(plan, 1);
    const ScheduledChunk* prefill = chunk_of(plan, 2);
    ASSERT_NE(decode, nullptr);
    ASSERT_NE(prefill, nullptr);
    EXPECT_EQ(decode->n_tokens, 1);
    EXPECT_EQ(prefill->n_tokens, step < 4 ? 7 : 2);
    EXPECT_LE(plan.n_tokens, 8);
    finish_step(scheduler, plan);
  }
  plan = scheduler.schedule();
  EXPECT_EQ(chunk_of(plan, 2)->n_tokens, 2);
  EXPECT_TRUE(chunk_of(plan, 2)->wants_logits);
}

TEST(SchedulerTest, RespectsMaxRunning) {
  BlockManager blocks(64, 4);
  Scheduler scheduler({2, 64}, blocks);
  for (SeqId id = 1; id <= 3; ++id) scheduler.add(make_seq(id, 2));
  StepPlan plan = scheduler.schedule();
  EXPECT_EQ(plan.chunks.size(), 2u);
  EXPECT_EQ(scheduler.n_running(), 2);
  EXPECT_EQ(scheduler.n_waiting(), 1);
  finish_step(scheduler, plan);
  scheduler.remove(1);
  plan = scheduler.schedule();
  ASSERT_EQ(plan.chunks.size(), 2u);
  EXPECT_EQ(plan.chunks[1].seq->id, 3u);
}

TEST(SchedulerTest, WaitsForBlocksInsteadOfOvertaking) {
  BlockManager blocks(4, 4);
  Scheduler scheduler({8, 64}, blocks);
  scheduler.add(make_seq(1, 8));   // 2 blocks
  scheduler.add(make_seq(2, 12));  // 3 blocks: does not fit next to 1
  scheduler.add(make_seq(3, 2));   // would fit, but must not overtake 2
  StepPlan plan = scheduler.schedule();
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].seq->id, 1u);
  EXPECT_EQ(scheduler.n_waiting(), 2);
  finish_step(scheduler, plan);
  scheduler.remove(1);
  EXPECT_EQ(blocks.n_free(), 4);
  plan = scheduler.schedule();
  ASSERT_EQ(plan.chunks.size(), 2u);  // 3 + 1 blocks: both fit now, in order
  EXPECT_EQ(plan.chunks[0].seq->id, 2u);
  EXPECT_EQ(plan.chunks[1].seq->id, 3u);
}

TEST(SchedulerTest, PreemptsTheNewestWhenBlocksRunOut) {
  BlockManager blocks(4, 4);
  Scheduler scheduler({8, 64}, blocks);
  scheduler.add(make_seq(1, 8));  // fills 2 blocks exactly
  scheduler.add(make_seq(2, 8));
  StepPlan plan = scheduler.schedule();
  ASSERT_EQ(plan.chunks.size(), 2u);
  finish_step(scheduler, plan);  // both now hold 9 tokens, 8 computed
  EXPECT_EQ(blocks.n_free(), 0);

  // Sequence 1 needs a third block for its 9th token: 2 is preempted, not 1 failed.
  plan = scheduler.schedule();
  ASSERT_EQ(plan.preempted.size(), 1u);
  EXPECT_EQ(plan.preempted[0]->id, 2u);
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].seq->id, 1u);
  EXPECT_EQ(scheduler.preemptions_total(), 1u);
  Sequence* victim = scheduler.find(2);
  ASSERT_NE(victim, nullptr);
  EXPECT_EQ(victim->state, SequenceState::kWaiting);
  EXPECT_EQ(victim->n_computed, 0);
  EXPECT_EQ(victim->n_tokens(), 9);  // prompt + generated, all to be recomputed
  EXPECT_EQ(victim->n_preemptions, 1);
  EXPECT_TRUE(blocks.block_table(2).empty());
  EXPECT_EQ(scheduler.waiting().front()->id, 2u);
  finish_step(scheduler, plan);

  // Once 1 finishes, 2 comes back and recomputes all of its 9 tokens in one chunk.
  scheduler.remove(1);
  plan = scheduler.schedule();
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].seq->id, 2u);
  EXPECT_EQ(plan.chunks[0].n_tokens, 9);
  EXPECT_TRUE(plan.chunks[0].wants_logits);
  EXPECT_TRUE(plan.first_admitted.empty());  // it had been scheduled before
}

TEST(SchedulerTest, NewestPreemptsItselfWhenItIsTheOneShort) {
  BlockManager blocks(4, 4);
  Scheduler scheduler({8, 64}, blocks);
  scheduler.add(make_seq(1, 7));  // 2 blocks, one slot left in the second
  scheduler.add(make_seq(2, 8));  // 2 blocks, full
  StepPlan plan = scheduler.schedule();
  finish_step(scheduler, plan);
  // 1 decodes its 8th token in place; 2 needs a new block and is the newest.
  plan = scheduler.schedule();
  ASSERT_EQ(plan.preempted.size(), 1u);
  EXPECT_EQ(plan.preempted[0]->id, 2u);
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].seq->id, 1u);
}

TEST(SchedulerTest, RemoveFreesBlocksFromEitherQueue) {
  BlockManager blocks(8, 4);
  Scheduler scheduler({1, 64}, blocks);
  scheduler.add(make_seq(1, 5));
  scheduler.add(make_seq(2, 5));
  StepPlan plan = scheduler.schedule();
  finish_step(scheduler, plan);
  EXPECT_EQ(blocks.n_free(), 6);
  EXPECT_NE(scheduler.remove(2), nullptr);  // waiting
  EXPECT_NE(scheduler.remove(1), nullptr);  // running
  EXPECT_EQ(scheduler.remove(1), nullptr);
  EXPECT_EQ(blocks.n_free(), 8);
  EXPECT_TRUE(scheduler.idle());
}

TEST(SchedulerTest, BuildBatchLaysOutRowsAndTables) {
  BlockManager blocks(16, 4);
  Scheduler scheduler({8, 64}, blocks);
  scheduler.add(make_seq(1, 5));
  StepPlan plan = scheduler.schedule();
  finish_step(scheduler, plan);
  scheduler.add(make_seq(2, 3));
  plan = scheduler.schedule();
  Batch batch;
  build_batch(plan, blocks, batch);
  // Sequence 1 decodes its 6th token; sequence 2 prefills 3.
  EXPECT_EQ(batch.tokens, (std::vector<int32_t>{7, 2000, 2001, 2002}));
  EXPECT_EQ(batch.positions, (std::vector<int32_t>{5, 0, 1, 2}));
  EXPECT_EQ(batch.seq_index, (std::vector<int32_t>{0, 1, 1, 1}));
  EXPECT_EQ(batch.seq_lengths, (std::vector<int32_t>{6, 3}));
  EXPECT_EQ(batch.logit_rows, (std::vector<int32_t>{0, 3}));
  ASSERT_EQ(batch.blocks_per_seq, 2);
  const std::vector<int32_t>& table1 = blocks.block_table(1);
  const std::vector<int32_t>& table2 = blocks.block_table(2);
  EXPECT_EQ(batch.block_tables, (std::vector<int32_t>{table1[0], table1[1], table2[0], -1}));
}

// Random arrivals and departures with a small cache: the budget and running limits always
// hold, every running sequence's blocks cover what it computes, nothing is lost, and every
// sequence reaches its target length.
// 150 random sequences through 96 tokens of blocks: every step within its bounds, every
// sequence finished, every block back; `preemptions` gets how many it took.
void run_random_workload(const SchedulerConfig& config, uint64_t& preemptions) {
  BlockManager blocks(24, 4);  // 96 tokens
  Scheduler scheduler(config, blocks);
  std::mt19937 rng(11);
  std::map<SeqId, int32_t> target_length;
  SeqId next_id = 1;
  int finished = 0;
  for (int step = 0; step < 3000 && finished < 150; ++step) {
    if (next_id <= 150 && rng() % 3 == 0) {
      int32_t n_prompt = 1 + static_cast<int32_t>(rng() % 30);
      target_length[next_id] = n_prompt + 1 + static_cast<int32_t>(rng() % 20);  // <= 50 < 96
      scheduler.add(make_seq(next_id, n_prompt));
      ++next_id;
    }
    StepPlan plan = scheduler.schedule();
    ASSERT_LE(plan.n_tokens, 12);
    ASSERT_LE(scheduler.n_running(), 5);
    if (!scheduler.idle()) {
      ASSERT_FALSE(plan.empty()) << "no progress at step " << step;
    }
    for (const ScheduledChunk& chunk : plan.chunks) {
      ASSERT_GT(chunk.n_tokens, 0);
      ASSERT_EQ(chunk.seq->state, SequenceState::kRunning);
      int32_t covered = static_cast<int32_t>(blocks.block_table(chunk.seq->id).size()) * 4;
      ASSERT_GE(covered, chunk.seq->n_computed + chunk.n_tokens);
    }
    for (Sequence* victim : plan.preempted) {
      ASSERT_EQ(chunk_of(plan, victim->id), nullptr);
      ASSERT_EQ(victim->state, SequenceState::kWaiting);
    }
    finish_step(scheduler, plan);
    std::vector<SeqId> done;
    for (const auto& seq : scheduler.running()) {
      if (seq->n_tokens() >= target_length[seq->id] && seq->n_pending() == 1)
        done.push_back(seq->id);
    }
    for (SeqId id : done) {
      ASSERT_NE(scheduler.remove(id), nullptr);
      ++finished;
    }
    int32_t held = 0;
    for (const auto& seq : scheduler.running())
      held += static_cast<int32_t>(blocks.block_table(seq->id).size());
    for (const auto& seq : scheduler.waiting()) ASSERT_TRUE(blocks.block_table(seq->id).empty());
    ASSERT_EQ(held + blocks.n_free(), 24);
  }
  EXPECT_EQ(finished, 150);
  EXPECT_TRUE(scheduler.idle());
  EXPECT_EQ(blocks.n_free(), 24);
  preemptions = scheduler.preemptions_total();
}

TEST(SchedulerTest, RandomWorkloadKeepsInvariants) {
  uint64_t preemptions = 0;
  ASSERT_NO_FATAL_FAILURE(
      run_random_workload({/*max_running=*/5, /*max_batch_tokens=*/12}, preemptions));
  EXPECT_GT(preemptions, 0u);
  // Prompt rows beside decodes bounded to 4, a row counting 1 + its context / 8: long prompts
  // crawl at their minimum rows, and still every sequence finishes.
  ASSERT_NO_FATAL_FAILURE(run_random_workload({/*max_running=*/5, /*max_batch_tokens=*/12,
                                               /*prefill_chunk_tokens=*/4,
                                               /*prefill_context_per_row=*/8},
                                              preemptions));
}

// While sequences decode, prompt rows are bounded by max(prefill_chunk_tokens, decodes);
// without decodes a step takes the whole budget.
TEST(SchedulerTest, PromptRowsBesideDecodesAreBoundedByTheChunk) {
  BlockManager blocks(512, 4);
  Scheduler scheduler({/*max_running=*/16, /*max_batch_tokens=*/64, /*prefill_chunk_tokens=*/8},
                      blocks);
  for (SeqId id = 1; id <= 3; ++id) scheduler.add(make_seq(id, 2));
  StepPlan plan = scheduler.schedule();  // no decodes yet: three prompts at once
  EXPECT_EQ(plan.n_tokens, 6);
  finish_step(scheduler, plan);

  scheduler.add(make_seq(4, 40));
  plan = scheduler.schedule();  // three decodes and 8 prompt rows
  ASSERT_EQ(plan.chunks.size(), 4u);
  EXPECT_EQ(plan.n_tokens, 3 + 8);
  EXPECT_EQ(chunk_of(plan, 4)->n_tokens, 8);
  finish_step(scheduler, plan);

  // Twelve decodes: the prompt may take as many rows as they are.
  BlockManager more_blocks(512, 4);
  Scheduler wide({/*max_running=*/16, /*max_batch_tokens=*/64, /*prefill_chunk_tokens=*/8},
                 more_blocks);
  for (SeqId id = 1; id <= 12; ++id) wide.add(make_seq(id, 1));
  plan = wide.schedule();
  EXPECT_EQ(plan.n_tokens, 12);
  finish_step(wide, plan);
  wide.add(make_seq(100, 40));
  plan = wide.schedule();
  EXPECT_EQ(chunk_of(plan, 100)->n_tokens, 12);
  EXPECT_EQ(plan.n_tokens, 24);
}

// Row units of n prompt rows from `start` (row start + i attends to start + i + 1 positions).
double row_units(int64_t start, int32_t n, int32_t context_per_row) {
  const double rows = n;
  return rows + (rows * static_cast<double>(start + 1) + rows * (rows - 1) / 2) / context_per_row;
}

// Beside decodes a prompt row counts 1 + its context / prefill_context_per_row against the
// chunk bound: a long prompt's late chunks take fewer rows (as many as fit), early ones almost
// the whole bound.
TEST(SchedulerTest, LatePromptChunksBesideDecodesTakeFewerRows) {
  BlockManager blocks(4096, 16);
  Scheduler scheduler({/*max_running=*/16, /*max_batch_tokens=*/512, /*prefill_chunk_tokens=*/256,
                       /*prefill_context_per_row=*/4096},
                      blocks);
  for (SeqId id = 1; id <= 3; ++id) scheduler.add(make_seq(id, 4));
  finish_step(scheduler, scheduler.schedule());
  scheduler.add(make_seq(9, 20000));
  Sequence* long_prompt = scheduler.find(9);
  std::vector<std::pair<int32_t, int32_t>> chunks;  // (first position, rows)
  while (long_prompt->n_computed < long_prompt->n_prompt) {
    const int32_t start = long_prompt->n_computed;
    StepPlan plan = scheduler.schedule();
    const ScheduledChunk* chunk = chunk_of(plan, 9);
    ASSERT_NE(chunk, nullptr);
    ASSERT_GE(chunk->n_tokens, 1);
    EXPECT_EQ(plan.n_tokens, 3 + chunk->n_tokens);
    EXPECT_LE(row_units(start, chunk->n_tokens, 4096), 256.0);
    if (start + chunk->n_tokens < long_prompt->n_prompt) {
      EXPECT_GT(row_units(start, chunk->n_tokens + 1, 4096), 256.0) << "at " << start;
    }
    chunks.emplace_back(start, chunk->n_tokens);
    finish_step(scheduler, plan);
  }
  EXPECT_EQ(chunks.front().second, 248);  // 248 + (248 * 249 / 2) / 4096 = 255.5 units
  for (const auto& [start, rows] : chunks) {
    EXPECT_LE(rows, 256.0 / (1.0 + start / 4096.0)) << "at " << start;
  }
  EXPECT_LE(chunks.back().second, 256 / 5);  // from 16k positions on: 1 + 4 units a row

  // A prompt admitted behind one that took the units waits (no overtaking), though rows remain.
  scheduler.add(make_seq(10, 30000));
  scheduler.add(make_seq(11, 100));
  StepPlan plan = scheduler.schedule();
  ASSERT_NE(chunk_of(plan, 10), nullptr);
  EXPECT_EQ(chunk_of(plan, 10)->n_tokens, 248);
  EXPECT_EQ(chunk_of(plan, 11), nullptr);  // nothing left
  finish_step(scheduler, plan);
}

// The first prompt chunk of a step always progresses, by at least kMinPromptRows rows (within
// the row bound), however long its context.
TEST(SchedulerTest, PromptBesideDecodesAlwaysProgresses) {
  BlockManager blocks(1024, 16);
  Scheduler scheduler({/*max_running=*/16, /*max_batch_tokens=*/512, /*prefill_chunk_tokens=*/64,
                       /*prefill_context_per_row=*/16},
                      blocks);
  scheduler.add(make_seq(1, 4));
  finish_step(scheduler, scheduler.schedule());
  scheduler.add(make_seq(2, 2000));
  Sequence* seq = scheduler.find(2);
  int steps = 0;
  while (seq->n_computed < seq->n_prompt) {
    const int32_t start = seq->n_computed;
    StepPlan plan = scheduler.schedule();
    const ScheduledChunk* chunk = chunk_of(plan, 2);
    ASSERT_NE(chunk, nullptr);
    const int32_t expected_min = std::min(kMinPromptRows, seq->n_prompt - start);
    EXPECT_GE(chunk->n_tokens, expected_min);
    // Past 1024 positions one row costs more than the 64 units: exactly the minimum.
    if (start > 1024) {
      EXPECT_EQ(chunk->n_tokens, expected_min);
    }
    finish_step(scheduler, plan);
    ++steps;
  }
  EXPECT_LT(steps, 2000 / kMinPromptRows + 64);
}

}  // namespace
}  // namespace llamaserve