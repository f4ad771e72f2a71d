#include "engine/scheduler.h"

#include <algorithm>
#include <cassert>
#include <limits>

namespace llamaserve {

Scheduler::Scheduler(const SchedulerConfig& config, BlockManager& blocks)
    : config_(config), blocks_(blocks) {
  assert(config_.max_running >= 1 && config_.max_batch_tokens >= 1 &&
         config_.prefill_chunk_tokens >= 0 && config_.prefill_context_per_row >= 0);
}

void Scheduler::add(std::unique_ptr<Sequence> seq) {
  assert(seq && seq->n_prompt >= 1);
  seq->state = SequenceState::kWaiting;
  waiting_.push_back(std::move(seq));
}

std::unique_ptr<Sequence> Scheduler::remove(SeqId id) {
  for (auto* queue : {&running_, &waiting_}) {
    auto it =
        std::find_if(queue->begin(), queue->end(), [&](const auto& s) { return s->id == id; });
    if (it == queue->end()) continue;
    std::unique_ptr<Sequence> seq = std::move(*it);
    queue->erase(it);
    blocks_.free_sequence(id);
    return seq;
  }
  return nullptr;
}

Sequence* Scheduler::find(SeqId id) const {
  for (const auto* queue : {&running_, &waiting_}) {
    for (const auto& seq : *queue) {
      if (seq->id == id) return seq.get();
    }
  }
  return nullptr;
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  StepBudget budget{config_.max_batch_tokens, std::numeric_limits<double>::infinity()};

  // Preemption reorders running_, so walk a snapshot and skip whatever left the running set.
  std::vector<Sequence*> order;
  order.reserve(running_.size());
  for (const auto& seq : running_) order.push_back(seq.get());

  for (Sequence* seq : order) {
    if (budget.rows == 0) break;
    if (seq->state == SequenceState::kRunning && seq->n_pending() == 1) {
      schedule_running(seq, 1, /*allow_partial=*/false, plan, budget);
    }
  }
  const auto n_decodes = static_cast<int32_t>(plan.chunks.size());
  if (n_decodes > 0 && config_.prefill_chunk_tokens > 0) {
    const int32_t bound = std::max(n_decodes, config_.prefill_chunk_tokens);
    budget.rows = std::min(budget.rows, bound);
    if (config_.prefill_context_per_row > 0) budget.row_units = bound;
  }
  for (Sequence* seq : order) {
    if (budget.rows == 0) break;
    if (seq->state == SequenceState::kRunning && seq->n_pending() > 1) {
      const int32_t rows =
          prompt_rows(seq->n_computed, std::min(seq->n_pending(), budget.rows), budget);
      if (rows > 0) schedule_running(seq, rows, /*allow_partial=*/true, plan, budget);
    }
  }
  // A sequence preempted in this step would only be readmitted to thrash again.
  if (plan.preempted.empty()) admit_waiting(plan, budget);

  plan.n_tokens = 0;
  for (const ScheduledChunk& chunk : plan.chunks) plan.n_tokens += chunk.n_tokens;
  return plan;
}

void Scheduler::schedule_running(Sequence* seq, int32_t max_tokens, bool allow_partial,
                                 StepPlan& plan, StepBudget& budget) {
  while (true) {
    int32_t n_tokens = max_tokens;
    int32_t n_free = blocks_.n_free();
    if (allow_partial && blocks_.blocks_needed(seq->id, seq->n_computed + n_tokens) > n_free) {
      int32_t n_owned = static_cast<int32_t>(blocks_.block_table(seq->id).size());
      int32_t fits = (n_owned + n_free) * blocks_.block_size() - seq->n_computed;
      if (fits > 0) n_tokens = std::min(n_tokens, fits);
    }
    if (blocks_.reserve(seq->id, seq->n_computed + n_tokens).is_ok()) {
      plan.chunks.push_back({seq, n_tokens, seq->n_computed + n_tokens == seq->n_tokens()});
      spend(budget, seq->n_computed, n_tokens, /*prompt=*/allow_partial);
      return;
    }
    if (preempt_newest(plan, budget) == seq) return;
  }
}

Sequence* Scheduler::preempt_newest(StepPlan& plan, StepBudget& budget) {
  assert(!running_.empty());
  std::unique_ptr<Sequence> victim = std::move(running_.back());
  running_.pop_back();
  auto planned = std::find_if(plan.chunks.begin(), plan.chunks.end(),
                              [&](const ScheduledChunk& c) { return c.seq == victim.get(); });
  if (planned != plan.chunks.end()) {
    budget.rows += planned->n_tokens;
    plan.chunks.erase(planned);
  }
  blocks_.free_sequence(victim->id);
  victim->n_computed = 0;
  victim->state = SequenceState::kWaiting;
  ++victim->n_preemptions;
  ++preemptions_total_;
  Sequence* raw = victim.get();
  plan.preempted.push_back(raw);
  // Newest first to the front: after several preemptions the oldest victim leads the queue.
  waiting_.push_front(std::move(victim));
  return raw;
}

void Scheduler::admit_waiting(StepPlan& plan, StepBudget& budget) {
  while (!waiting_.empty() && n_running() < config_.max_running && budget.rows > 0) {
    Sequence* seq = waiting_.front().get();
    // At least the last token is computed: its row gives the logits of the next one.
    const int32_t n_cached =
        blocks_.attach_cached_prefix(seq->id, seq->tokens, seq->n_tokens() - 1);
    seq->n_computed = n_cached;
    const int32_t n_tokens =
        prompt_rows(seq->n_computed, std::min(seq->n_pending(), budget.rows), budget);
    if (n_tokens == 0 || !blocks_.reserve(seq->id, seq->n_computed + n_tokens).is_ok()) {
      blocks_.free_sequence(seq->id);  // the cached blocks go back, still cached
      seq->n_computed = 0;
      break;
    }
    if (blocks_.prefix_caching()) {
      ++prefix_stats_.queries;
      prefix_stats_.query_tokens += static_cast<uint64_t>(seq->n_tokens());
      prefix_stats_.hit_tokens += static_cast<uint64_t>(n_cached);
    }
    seq->state = SequenceState::kRunning;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    plan.chunks.push_back({seq, n_tokens, seq->n_computed + n_tokens == seq->n_tokens()});
    spend(budget, seq->n_computed, n_tokens, /*prompt=*/true);
    if (!seq->ever_scheduled) {
      seq->ever_scheduled = true;
      plan.first_admitted.push_back(seq);
    }
  }
}

double Scheduler::prompt_row_units(int64_t start, int32_t n_rows) const {
  // Row start + i attends to start + i + 1 positions.
  const double n = n_rows;
  const double positions = n * static_cast<double>(start + 1) + n * (n - 1) / 2;
  return n + positions / config_.prefill_context_per_row;
}

int32_t Scheduler::prompt_rows(int64_t start, int32_t max_rows, const StepBudget& budget) const {
  if (max_rows <= 0 || budget.row_units == std::numeric_limits<double>::infinity()) {
    return std::max(max_rows, 0);
  }
  // The largest count within the units (they grow with the count).
  int32_t lo = 0, hi = max_rows;
  while (lo < hi) {
    const int32_t mid = lo + (hi - lo + 1) / 2;
    if (prompt_row_units(start, mid) <= budget.row_units) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return budget.prompt_planned ? lo : std::max(lo, std::min(max_rows, kMinPromptRows));
}

void Scheduler::spend(StepBudget& budget, int64_t start, int32_t n_rows, bool prompt) const {
  budget.rows -= n_rows;
  if (!prompt) return;
  budget.prompt_planned = true;
  if (budget.row_units != std::numeric_limits<double>::infinity()) {
    budget.row_units = std::max(0.0, budget.row_units - prompt_row_units(start, n_rows));
  }
}

void Scheduler::complete(const StepPlan& plan) {
  for (const ScheduledChunk& chunk : plan.chunks) {
    chunk.seq->n_computed += chunk.n_tokens;
    assert(chunk.seq->n_computed <= chunk.seq->n_tokens());
    blocks_.commit_computed(chunk.seq->id, chunk.seq->tokens, chunk.seq->n_computed);
  }
}

void build_batch(const StepPlan& plan, const BlockManager& blocks, Batch& batch) {
  batch.clear();
  int32_t blocks_per_seq = 0;
  for (const ScheduledChunk& chunk : plan.chunks) {
    blocks_per_seq =
        std::max(blocks_per_seq, static_cast<int32_t>(blocks.block_table(chunk.seq->id).size()));
  }
  batch.blocks_per_seq = blocks_per_seq;
  batch.block_tables.reserve(plan.chunks.size() * static_cast<size_t>(blocks_per_seq));
  for (size_t s = 0; s < plan.chunks.size(); ++s) {
    const ScheduledChunk& chunk = plan.chunks[s];
    const Sequence& seq = *chunk.seq;
    for (int32_t i = 0; i < chunk.n_tokens; ++i) {
      int32_t position = seq.n_computed + i;
      batch.tokens.push_back(seq.tokens[position]);
      batch.positions.push_back(position);
      batch.seq_index.push_back(static_cast<int32_t>(s));
    }
    const std::vector<int32_t>& table = blocks.block_table(seq.id);
    batch.block_tables.insert(batch.block_tables.end(), table.begin(), table.end());
    batch.block_tables.insert(batch.block_tables.end(), blocks_per_seq - table.size(), -1);
    batch.seq_lengths.push_back(seq.n_computed + chunk.n_tokens);
    if (chunk.wants_logits) batch.logit_rows.push_back(batch.n_tokens() - 1);
  }
}

}  // namespace llamaserve
