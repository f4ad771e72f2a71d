#include "engine/embedding_batcher.h"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace llamaserve {

void l2_normalize(std::span<float> v) {
  double squares = 0.0;
  for (float x : v) squares += static_cast<double>(x) * x;
  if (squares <= 0.0) return;
  const double scale = 1.0 / std::sqrt(squares);
  for (float& x : v) x = static_cast<float>(x * scale);
}

EmbeddingBatcher::EmbeddingBatcher(BlockManager& blocks, int32_t max_pass_tokens,
                                   int32_t max_pass_seqs, int32_t n_embd)
    : blocks_(blocks),
      max_pass_tokens_(max_pass_tokens),
      max_pass_seqs_(max_pass_seqs),
      n_embd_(n_embd) {
  // n_embd is 0 for an executor without hidden rows; the engine then refuses embeddings.
  assert(max_pass_tokens_ >= 1 && max_pass_seqs_ >= 1 && n_embd_ >= 0);
}

void EmbeddingBatcher::add(std::unique_ptr<EmbeddingJob> job) {
  assert(job && !job->inputs.empty());
  job->embeddings.assign(job->inputs.size() * static_cast<size_t>(n_embd_), 0.0f);
  jobs_.push_back(std::move(job));
}

int32_t EmbeddingBatcher::n_waiting() const {
  return static_cast<int32_t>(
      std::count_if(jobs_.begin(), jobs_.end(), [](const auto& job) { return !job->started; }));
}

void EmbeddingBatcher::add_chunk(size_t item, int32_t n_tokens, Batch& batch) {
  const Item& it = items_[item];
  const std::vector<int32_t>& tokens = it.job->inputs[it.input];
  const auto s = static_cast<int32_t>(planned_.size());
  const bool last_chunk = it.n_computed + n_tokens == static_cast<int32_t>(tokens.size());
  int32_t n_hidden = 0;
  for (int32_t i = 0; i < n_tokens; ++i) {
    const int32_t position = it.n_computed + i;
    batch.tokens.push_back(tokens[static_cast<size_t>(position)]);
    batch.positions.push_back(position);
    batch.seq_index.push_back(s);
    // Mean pooling reads every row; last pooling only the input's final one.
    if (it.job->pooling == EmbeddingPooling::kMean || (last_chunk && i == n_tokens - 1)) {
      batch.logit_rows.push_back(batch.n_tokens() - 1);
      ++n_hidden;
    }
  }
  batch.seq_lengths.push_back(it.n_computed + n_tokens);
  planned_.push_back({item, n_tokens, n_hidden});
}

bool EmbeddingBatcher::plan(Batch& batch, SeqId& next_seq_id, std::vector<EmbeddingJob*>& started) {
  batch.clear();
  planned_.clear();
  int32_t budget = max_pass_tokens_;
  // Inputs already started go first: their blocks are held until they finish.
  for (size_t i = 0; i < items_.size(); ++i) {
    if (budget == 0 || static_cast<int32_t>(planned_.size()) == max_pass_seqs_) break;
    const auto left =
        static_cast<int32_t>(items_[i].job->inputs[items_[i].input].size()) - items_[i].n_computed;
    const int32_t n = std::min(left, budget);
    add_chunk(i, n, batch);
    budget -= n;
  }
  // Then new inputs, FIFO, all of an input's blocks at once.
  for (const auto& job : jobs_) {
    bool blocked = false;
    while (job->next_input < job->inputs.size()) {
      if (budget == 0 || static_cast<int32_t>(planned_.size()) == max_pass_seqs_) {
        blocked = true;
        break;
      }
      const auto n_tokens = static_cast<int32_t>(job->inputs[job->next_input].size());
      const SeqId seq = next_seq_id;
      if (!blocks_.reserve(seq, n_tokens).is_ok()) {
        blocked = true;
        break;
      }
      ++next_seq_id;
      items_.push_back({job.get(), job->next_input, seq, 0, {}});
      items_.back().sum.assign(static_cast<size_t>(n_embd_), 0.0);
      ++job->next_input;
      if (!job->started) {
        job->started = true;
        started.push_back(job.get());
      }
      const int32_t n = std::min(n_tokens, budget);
      add_chunk(items_.size() - 1, n, batch);
      budget -= n;
    }
    if (blocked) break;
  }
  if (planned_.empty()) return false;

  int32_t blocks_per_seq = 0;
  for (const Chunk& chunk : planned_) {
    blocks_per_seq = std::max(
        blocks_per_seq, static_cast<int32_t>(blocks_.block_table(items_[chunk.item].seq).size()));
  }
  batch.blocks_per_seq = blocks_per_seq;
  batch.block_tables.reserve(planned_.size() * static_cast<size_t>(blocks_per_seq));
  for (const Chunk& chunk : planned_) {
    const std::vector<int32_t>& table = blocks_.block_table(items_[chunk.item].seq);
    batch.block_tables.insert(batch.block_tables.end(), table.begin(), table.end());
    batch.block_tables.insert(batch.block_tables.end(), blocks_per_seq - table.size(), -1);
  }
  return true;
}

void EmbeddingBatcher::complete(std::span<const float> hidden,
                                std::vector<std::unique_ptr<EmbeddingJob>>& finished) {
  const auto width = static_cast<size_t>(n_embd_);
  size_t row = 0;
  for (const Chunk& chunk : planned_) {
    Item& item = items_[chunk.item];
    for (int32_t r = 0; r < chunk.n_hidden; ++r, ++row) {
      const float* values = hidden.data() + row * width;
      if (item.job->pooling == EmbeddingPooling::kMean) {
        for (size_t c = 0; c < width; ++c) item.sum[c] += values[c];
      } else {
        std::copy(values, values + width, item.sum.begin());
      }
    }
    item.n_computed += chunk.n_tokens;
  }
  planned_.clear();

  // Inputs that ended: their vector into the job, their blocks back.
  std::erase_if(items_, [&](Item& item) {
    const std::vector<int32_t>& tokens = item.job->inputs[item.input];
    if (item.n_computed < static_cast<int32_t>(tokens.size())) return false;
    const double scale = item.job->pooling == EmbeddingPooling::kMean
                             ? 1.0 / static_cast<double>(tokens.size())
                             : 1.0;
    std::span<float> out(item.job->embeddings.data() + item.input * width, width);
    for (size_t c = 0; c < width; ++c) out[c] = static_cast<float>(item.sum[c] * scale);
    l2_normalize(out);
    blocks_.free_sequence(item.seq);
    ++item.job->n_done;
    return true;
  });
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if ((*it)->done()) {
      finished.push_back(std::move(*it));
      it = jobs_.erase(it);
    } else {
      ++it;
    }
  }
}

void EmbeddingBatcher::fail_planned(std::vector<std::unique_ptr<EmbeddingJob>>& failed) {
  std::vector<const EmbeddingJob*> jobs;
  for (const Chunk& chunk : planned_) {
    const EmbeddingJob* job = items_[chunk.item].job;
    if (std::find(jobs.begin(), jobs.end(), job) == jobs.end()) jobs.push_back(job);
  }
  planned_.clear();
  for (const EmbeddingJob* job : jobs) failed.push_back(remove(job));
}

void EmbeddingBatcher::free_items_of(const EmbeddingJob* job) {
  std::erase_if(items_, [&](const Item& item) {
    if (item.job != job) return false;
    blocks_.free_sequence(item.seq);
    return true;
  });
}

std::unique_ptr<EmbeddingJob> EmbeddingBatcher::remove(const EmbeddingJob* job) {
  auto it = std::find_if(jobs_.begin(), jobs_.end(),
                         [&](const auto& candidate) { return candidate.get() == job; });
  if (it == jobs_.end()) return nullptr;
  free_items_of(job);
  std::unique_ptr<EmbeddingJob> taken = std::move(*it);
  jobs_.erase(it);
  return taken;
}

}  // namespace llamaserve
