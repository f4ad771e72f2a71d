// BlockManager: host-side bookkeeping of the paged KV cache. The executor owns the memory;
// this class only decides which physical block holds which positions of which sequence.
//
// Blocks are reference counted so several sequences can share a prefix (fork, prefix
// caching). Only blocks that are completely filled are ever shared, so a sequence never
// writes into a block that another sequence reads: the next token after a shared prefix
// always lands in a block the sequence owns alone.
//
// Prefix caching (when enabled): every block a sequence has completely computed is indexed
// by its content (PrefixCache); when its last owner lets go it stays free but reusable, and a
// new sequence starting with the same tokens takes it back instead of recomputing it.
// allocate() hands out never-indexed blocks first, then evicts the least recently released
// indexed block.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "engine/prefix_cache.h"

namespace llamaserve {

using SeqId = uint64_t;

class BlockManager {
 public:
  // PRECONDITIONS: n_blocks >= 0, block_size >= 1.
  BlockManager(int32_t n_blocks, int32_t block_size, bool prefix_caching = false);

  int32_t n_blocks() const { return static_cast<int32_t>(ref_counts_.size()); }
  int32_t block_size() const { return block_size_; }
  bool prefix_caching() const { return prefix_caching_; }
  // Blocks allocate() can hand out: unused ones and cached ones nobody holds.
  int32_t n_free() const { return static_cast<int32_t>(free_list_.size()) + cache_.n_parked(); }
  // Of those, the blocks that still hold a reusable prefix.
  int32_t n_cached_free() const { return cache_.n_parked(); }
  // Cached blocks allocate() has overwritten since construction.
  uint64_t evictions_total() const { return evictions_total_; }
  int32_t n_sequences() const { return static_cast<int32_t>(tables_.size()); }
  // Blocks needed to hold `n_tokens` tokens.
  int32_t blocks_for_tokens(int32_t n_tokens) const;

  // Single blocks. allocate() fails with kResourceExhausted when none is free.
  Result<int32_t> allocate();
  void retain(int32_t block);   // one more owner
  void release(int32_t block);  // one owner fewer; back on the free list at zero
  int32_t ref_count(int32_t block) const;

  // Per-sequence tables.
  // Additional blocks `seq` needs so that its table covers `n_tokens` tokens (0 if it
  // already does). A sequence without a table needs blocks_for_tokens(n_tokens).
  int32_t blocks_needed(SeqId seq, int32_t n_tokens) const;
  // Grows the table of `seq` (creating it if needed) to cover `n_tokens` tokens. All or
  // nothing: when fewer than blocks_needed() blocks are free, allocates nothing and returns
  // kResourceExhausted.
  Status reserve(SeqId seq, int32_t n_tokens);
  // Makes `child` share the blocks of `parent` that hold its first `n_tokens` tokens; only
  // complete blocks are shared (floor(n_tokens / block_size)), the child recomputes the rest.
  // The child must not have a table yet.
  Status fork(SeqId parent, SeqId child, int32_t n_tokens);
  // Releases every block of `seq` and forgets its table. Unknown ids are ignored.
  void free_sequence(SeqId seq);
  // The physical blocks of `seq` in logical order (empty for unknown ids).
  const std::vector<int32_t>& block_table(SeqId seq) const;

  // Prefix caching; both are no-ops (attach returns 0) when it is off.
  // Starts the table of `seq` (which has none) with the cached blocks of the longest prefix of
  // `tokens` made of whole blocks and at most `max_tokens` long; returns the tokens they hold
  // (a multiple of block_size). The caller skips computing those tokens.
  int32_t attach_cached_prefix(SeqId seq, std::span<const int32_t> tokens, int32_t max_tokens);
  // Records that the K/V of the first `n_computed` of `tokens` are written: every block of
  // `seq` they fill completely becomes reusable by other sequences.
  void commit_computed(SeqId seq, std::span<const int32_t> tokens, int32_t n_computed);

 private:
  struct Table {
    std::vector<int32_t> blocks;
    // Chain hashes of the leading full blocks committed so far (hashes.size() <= blocks.size()).
    std::vector<uint64_t> hashes;
  };

  int32_t block_size_;
  bool prefix_caching_;
  std::vector<int32_t> ref_counts_;  // per physical block
  std::vector<int32_t> free_list_;   // never-indexed blocks with ref count 0; popped from the back
  PrefixCache cache_;                // indexed blocks; those with ref count 0 are parked there
  uint64_t evictions_total_ = 0;
  std::unordered_map<SeqId, Table> tables_;
};

}  // namespace llamaserve
