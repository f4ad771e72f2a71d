// Scheduler: decides, each step, which tokens of which sequences go into the next forward
// pass, under a token budget and the KV blocks available.
//
// Policy (FIFO, decode first):
//   1. Running sequences with one pending token (decode) get one token each.
//   2. Running sequences with more pending tokens (a prompt, or a recompute after
//      preemption) get a chunk of what is left of the budget: long prompts are split across
//      steps (chunked prefill) so decodes of other sequences keep flowing. While there are
//      decodes, prompt rows are also bounded by prefill_chunk_tokens (or the decode count,
//      whichever is larger): a step costs about the weights' read plus its rows, so this keeps
//      the decodes' inter-token latency within a small multiple of a decode-only step. A row
//      late in a long prompt also attends to thousands of positions: with
//      prefill_context_per_row it counts as 1 + its context / prefill_context_per_row rows
//      against that bound (the first prompt of a step gets at least kMinPromptRows rows).
//   3. Waiting sequences are admitted in FIFO order while there is budget, a running slot and
//      free blocks for their first chunk. A sequence that does not fit blocks those behind it
//      (no overtaking), so large requests are not starved by small ones. With prefix caching,
//      an admitted sequence starts after the longest prefix of its tokens the cache holds.
// When a running sequence needs a block and none is free, the newest running sequence is
// preempted: its blocks are freed and it goes back to the front of the waiting queue, to
// recompute its prompt and generated tokens when it is admitted again. Nothing is dropped.
//
// Only the engine thread uses a Scheduler; it is not thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "backend/batch.h"
#include "engine/block_manager.h"
#include "engine/sequence.h"

namespace llamaserve {

struct SchedulerConfig {
  int32_t max_running = 64;        // sequences in the running set
  int32_t max_batch_tokens = 512;  // token rows per forward pass
  // Prompt rows of a step that also decodes: at most max(this, the step's decode rows), so
  // that a burst of prompts stretches the decodes' step by a bounded factor; 0 = no bound
  // beyond max_batch_tokens. Steps without decodes always take max_batch_tokens.
  int32_t prefill_chunk_tokens = 0;
  // Positions of context that cost a prompt row beside decodes as much as the row itself:
  // such a row counts as 1 + (positions it attends to) / this against prefill_chunk_tokens;
  // 0 = every row counts 1.
  int32_t prefill_context_per_row = 0;
};

// Rows the first prompt chunk of a step beside decodes gets at least, whatever its context:
// a long prompt always progresses.
inline constexpr int32_t kMinPromptRows = 16;

// What is left of a step's budget: rows (max_batch_tokens, and beside decodes the prompt
// bound) and, for prompt rows beside decodes with prefill_context_per_row, row units (a row
// counting 1 + its context / prefill_context_per_row; infinite where unbounded).
struct StepBudget {
  int32_t rows = 0;
  double row_units = 0.0;
  bool prompt_planned = false;  // a prompt chunk is in the plan already
};

// Tokens [seq->n_computed, seq->n_computed + n_tokens) of one sequence in this step.
struct ScheduledChunk {
  Sequence* seq = nullptr;
  int32_t n_tokens = 0;
  // The chunk ends at the last known token, so its last row's logits pick the next token.
  bool wants_logits = false;
};

// Lookups of the prefix cache at admission (re-admissions after preemption included).
struct PrefixCacheStats {
  uint64_t queries = 0;       // sequences admitted with a lookup
  uint64_t query_tokens = 0;  // their tokens
  uint64_t hit_tokens = 0;    // of those, tokens found in the cache and not computed again
};

struct StepPlan {
  std::vector<ScheduledChunk> chunks;
  std::vector<Sequence*> preempted;       // sent back to waiting during this step
  std::vector<Sequence*> first_admitted;  // scheduled for the first time in this step
  int32_t n_tokens = 0;

  bool empty() const { return chunks.empty(); }
};

class Scheduler {
 public:
  // `blocks` must outlive the scheduler.
  Scheduler(const SchedulerConfig& config, BlockManager& blocks);

  const SchedulerConfig& config() const { return config_; }

  // Appends a new sequence to the waiting queue. PRECONDITIONS: seq->n_prompt >= 1 and its
  // prompt plus generation fit in the KV cache on their own (the engine checks at submit).
  void add(std::unique_ptr<Sequence> seq);
  // Removes a sequence from whichever queue holds it and frees its blocks; nullptr for
  // unknown ids. Not to be called between schedule() and complete() for planned sequences.
  std::unique_ptr<Sequence> remove(SeqId id);
  Sequence* find(SeqId id) const;

  StepPlan schedule();
  // Records that the forward pass of `plan` ran: advances n_computed of every chunk.
  void complete(const StepPlan& plan);

  int32_t n_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  int32_t n_running() const { return static_cast<int32_t>(running_.size()); }
  bool idle() const { return waiting_.empty() && running_.empty(); }
  const std::deque<std::unique_ptr<Sequence>>& waiting() const { return waiting_; }
  const std::deque<std::unique_ptr<Sequence>>& running() const { return running_; }
  uint64_t preemptions_total() const { return preemptions_total_; }
  const PrefixCacheStats& prefix_cache_stats() const { return prefix_stats_; }

 private:
  // Plans up to `max_tokens` pending tokens of running `seq`, preempting newer sequences
  // when blocks run out. `allow_partial` lets a prefill chunk shrink to the free blocks.
  void schedule_running(Sequence* seq, int32_t max_tokens, bool allow_partial, StepPlan& plan,
                        StepBudget& budget);
  // Moves the newest running sequence back to the front of the waiting queue; drops its
  // chunk from `plan` (returning its rows to `budget`; its row units stay spent) if it had one.
  Sequence* preempt_newest(StepPlan& plan, StepBudget& budget);
  void admit_waiting(StepPlan& plan, StepBudget& budget);
  // Rows of a prompt chunk from position `start`, at most `max_rows`, that the budget's row
  // units allow (at least kMinPromptRows for the step's first prompt chunk).
  int32_t prompt_rows(int64_t start, int32_t max_rows, const StepBudget& budget) const;
  // The row units of `n_rows` prompt rows from position `start`.
  double prompt_row_units(int64_t start, int32_t n_rows) const;
  // Takes a planned chunk of `n_rows` rows from `start` out of the budget.
  void spend(StepBudget& budget, int64_t start, int32_t n_rows, bool prompt) const;

  SchedulerConfig config_;
  BlockManager& blocks_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::deque<std::unique_ptr<Sequence>> running_;  // in admission order: newest at the back
  uint64_t preemptions_total_ = 0;
  PrefixCacheStats prefix_stats_;
};

// Fills `batch` with the token rows of `plan`: one batch sequence per chunk, block tables
// from `blocks`, and a logit row for every chunk that wants logits (in chunk order).
void build_batch(const StepPlan& plan, const BlockManager& blocks, Batch& batch);

}  // namespace llamaserve
