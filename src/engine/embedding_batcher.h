// EmbeddingBatcher: the engine thread's bookkeeping of embedding requests, the second kind of
// request next to generations. Each input of a request runs as its own sequence, with KV
// blocks from the engine's BlockManager from its first chunk to its last (later chunks of a
// long input attend to the earlier ones); the final-normed hidden states of its rows are summed
// (mean pooling) or its last row kept (last pooling), and once every input of a request is done
// the vectors are L2-normalized and the request leaves the batcher.
//
// Policy: one forward pass per engine-loop iteration, beside the generation step, so that
// decodes keep flowing. A pass first continues inputs already started (their blocks are held),
// then starts inputs in FIFO order, request by request, while the token budget, the sequence
// limit and the free blocks allow. An input starts only when the blocks of all its tokens are
// free (all or nothing), so that started inputs always finish and never wait on each other; an
// input that does not fit blocks those behind it (no overtaking), as in the Scheduler.
//
// Only the engine thread uses a batcher; it is not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "backend/batch.h"
#include "engine/block_manager.h"
#include "engine/channel.h"
#include "engine/request.h"

namespace llamaserve {

struct EmbeddingJob {
  using Clock = std::chrono::steady_clock;

  std::shared_ptr<RequestChannel> channel;
  std::vector<std::vector<int32_t>> inputs;
  EmbeddingPooling pooling = EmbeddingPooling::kMean;
  int32_t n_prompt_tokens = 0;  // over every input

  Clock::time_point submitted;
  Clock::time_point first_scheduled;
  Clock::time_point deadline = Clock::time_point::max();        // request timeout
  Clock::time_point queue_deadline = Clock::time_point::max();  // until first scheduled
  bool started = false;                                         // some input had a chunk planned

  size_t next_input = 0;  // inputs [0, next_input) have started
  size_t n_done = 0;      // inputs whose vector is complete
  // inputs.size() × n_embd: each input's vector once it is done (unit length).
  std::vector<float> embeddings;

  bool done() const { return n_done == inputs.size(); }
};

class EmbeddingBatcher {
 public:
  // `blocks` must outlive the batcher. PRECONDITIONS: max_pass_tokens >= 1, max_pass_seqs >= 1,
  // n_embd >= 0 (0: the executor computes no hidden rows, and no job is ever added).
  EmbeddingBatcher(BlockManager& blocks, int32_t max_pass_tokens, int32_t max_pass_seqs,
                   int32_t n_embd);

  // PRECONDITIONS: at least one input, none empty, each within the KV cache on its own.
  void add(std::unique_ptr<EmbeddingJob> job);
  bool idle() const { return jobs_.empty(); }
  const std::deque<std::unique_ptr<EmbeddingJob>>& jobs() const { return jobs_; }
  int32_t n_waiting() const;  // jobs not started yet

  // Plans the next pass into `batch` (cleared first): one batch sequence per chunk, logit rows
  // for the rows whose hidden states are pooled. New inputs take their sequence ids from
  // `next_seq_id`. Jobs that start in this pass are appended to `started`. False when nothing
  // fits now (no free blocks): the batch is then empty.
  bool plan(Batch& batch, SeqId& next_seq_id, std::vector<EmbeddingJob*>& started);
  // Records the pass planned last: `hidden` holds the final-normed rows of its logit rows.
  // Inputs that ended free their blocks; jobs whose every input is done leave the batcher,
  // their vectors normalized, and are appended to `finished`.
  void complete(std::span<const float> hidden,
                std::vector<std::unique_ptr<EmbeddingJob>>& finished);
  // The pass planned last failed: every job with a chunk in it leaves the batcher (its blocks
  // freed) and is appended to `failed`.
  void fail_planned(std::vector<std::unique_ptr<EmbeddingJob>>& failed);
  // Takes a job out (cancelled, timed out, shut down), freeing the blocks of its inputs.
  // Not to be called between plan() and complete() / fail_planned().
  std::unique_ptr<EmbeddingJob> remove(const EmbeddingJob* job);

 private:
  // One started input: its sequence holds blocks for all its tokens.
  struct Item {
    EmbeddingJob* job = nullptr;
    size_t input = 0;
    SeqId seq = 0;
    int32_t n_computed = 0;
    std::vector<double> sum;  // n_embd: pooled rows so far (mean), or the last row
  };
  struct Chunk {
    size_t item = 0;  // index into items_
    int32_t n_tokens = 0;
    int32_t n_hidden = 0;  // its logit rows, in batch order
  };

  void add_chunk(size_t item, int32_t n_tokens, Batch& batch);
  void free_items_of(const EmbeddingJob* job);

  BlockManager& blocks_;
  const int32_t max_pass_tokens_;
  const int32_t max_pass_seqs_;
  const int32_t n_embd_;
  std::deque<std::unique_ptr<EmbeddingJob>> jobs_;  // in submission order
  std::vector<Item> items_;                         // started, not done; in start order
  std::vector<Chunk> planned_;                      // the last plan()'s chunks
};

// Scales `v` to unit L2 norm (left as is when its norm is 0).
void l2_normalize(std::span<float> v);

}  // namespace llamaserve
