// PrefixCache: the content index of the KV cache's full blocks, for prefix caching.
//
// A full block is named by a chain hash: the hash of its tokens and of the hash of the block
// before it, so equal hashes mean equal token prefixes from position 0 (checked: every entry
// also keeps its tokens and its parent's hash, and a lookup compares both, so a 64-bit
// collision costs a miss, never a wrong block). Each block is indexed at most once and one
// hash names at most one block.
//
// Indexed blocks nobody holds any more are "parked" in LRU order: they are free to be
// allocated, but until the BlockManager needs them (evict_oldest) a later sequence with the
// same prefix takes them back (unpark) instead of recomputing their tokens.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

namespace llamaserve {

class PrefixCache {
 public:
  // The chain hash of the first block (parent = kRootHash) or of a block after `parent`.
  static constexpr uint64_t kRootHash = 0x6c6c616d61736572ULL;
  static uint64_t chain_hash(uint64_t parent, std::span<const int32_t> block_tokens);

  // PRECONDITIONS: n_blocks >= 0, block_size >= 1.
  PrefixCache(int32_t n_blocks, int32_t block_size);

  // The block holding exactly `block_tokens` after the prefix named by `parent`; -1 if none.
  int32_t find(uint64_t hash, uint64_t parent, std::span<const int32_t> block_tokens) const;
  // Indexes `block` (not indexed yet) under `hash`; false, changing nothing, when another
  // block already holds this hash (two sequences computed the same prefix at once).
  bool insert(int32_t block, uint64_t hash, uint64_t parent, std::span<const int32_t> block_tokens);
  bool indexed(int32_t block) const { return entries_[static_cast<size_t>(block)].indexed; }

  // LRU of indexed blocks with no owner. PRECONDITIONS: park() an indexed, unparked block;
  // unpark() a parked one.
  void park(int32_t block);
  void unpark(int32_t block);
  bool parked(int32_t block) const { return entries_[static_cast<size_t>(block)].parked; }
  int32_t n_parked() const { return static_cast<int32_t>(lru_.size()); }
  // Drops the least recently parked block from the index and returns it (-1 if none is
  // parked): its contents are about to be overwritten.
  int32_t evict_oldest();

 private:
  struct Entry {
    bool indexed = false;
    bool parked = false;
    uint64_t hash = 0;
    uint64_t parent = 0;
    std::list<int32_t>::iterator lru_position;
  };

  std::span<const int32_t> tokens_of(int32_t block) const;

  int32_t block_size_;
  std::vector<Entry> entries_;   // per physical block
  std::vector<int32_t> tokens_;  // n_blocks x block_size: the tokens of each indexed block
  std::unordered_map<uint64_t, int32_t> by_hash_;
  std::list<int32_t> lru_;  // parked blocks, least recently parked first
};

}  // namespace llamaserve
