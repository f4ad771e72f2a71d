#include "engine/block_manager.h"

#include <algorithm>
#include <cassert>

namespace llamaserve {

BlockManager::BlockManager(int32_t n_blocks, int32_t block_size, bool prefix_caching)
    : block_size_(block_size),
      prefix_caching_(prefix_caching),
      ref_counts_(static_cast<size_t>(n_blocks), 0),
      cache_(n_blocks, block_size) {
  assert(n_blocks >= 0 && block_size >= 1);
  free_list_.reserve(static_cast<size_t>(n_blocks));
  // Reverse order so block 0 is handed out first: tables read naturally in logs and tests.
  for (int32_t block = n_blocks - 1; block >= 0; --block) free_list_.push_back(block);
}

int32_t BlockManager::blocks_for_tokens(int32_t n_tokens) const {
  if (n_tokens <= 0) return 0;
  return (n_tokens + block_size_ - 1) / block_size_;
}

Result<int32_t> BlockManager::allocate() {
  int32_t block = -1;
  if (!free_list_.empty()) {
    block = free_list_.back();
    free_list_.pop_back();
  } else {
    block = cache_.evict_oldest();
    if (block < 0) {
      return make_error(StatusCode::kResourceExhausted, "all {} KV cache blocks are in use",
                        n_blocks());
    }
    ++evictions_total_;
  }
  ref_counts_[block] = 1;
  return block;
}

void BlockManager::retain(int32_t block) {
  assert(block >= 0 && block < n_blocks() && ref_counts_[block] > 0);
  ++ref_counts_[block];
}

void BlockManager::release(int32_t block) {
  assert(block >= 0 && block < n_blocks() && ref_counts_[block] > 0);
  if (--ref_counts_[block] > 0) return;
  if (cache_.indexed(block)) {
    cache_.park(block);
  } else {
    free_list_.push_back(block);
  }
}

int32_t BlockManager::ref_count(int32_t block) const {
  if (block < 0 || block >= n_blocks()) return 0;
  return ref_counts_[block];
}

int32_t BlockManager::blocks_needed(SeqId seq, int32_t n_tokens) const {
  int32_t have = 0;
  if (auto it = tables_.find(seq); it != tables_.end())
    have = static_cast<int32_t>(it->second.blocks.size());
  int32_t want = blocks_for_tokens(n_tokens);
  return want > have ? want - have : 0;
}

Status BlockManager::reserve(SeqId seq, int32_t n_tokens) {
  int32_t needed = blocks_needed(seq, n_tokens);
  if (needed > n_free()) {
    return make_error(StatusCode::kResourceExhausted,
                      "sequence {} needs {} more KV blocks for {} tokens, {} of {} are free", seq,
                      needed, n_tokens, n_free(), n_blocks());
  }
  std::vector<int32_t>& table = tables_[seq].blocks;
  for (int32_t i = 0; i < needed; ++i) table.push_back(*allocate());
  return Status::ok();
}

Status BlockManager::fork(SeqId parent, SeqId child, int32_t n_tokens) {
  auto parent_it = tables_.find(parent);
  if (parent_it == tables_.end()) {
    return make_error(StatusCode::kNotFound, "fork: sequence {} has no KV blocks", parent);
  }
  if (tables_.count(child) != 0) {
    return make_error(StatusCode::kInvalidArgument, "fork: sequence {} already has KV blocks",
                      child);
  }
  const Table& from = parent_it->second;
  size_t n_shared = static_cast<size_t>(n_tokens > 0 ? n_tokens / block_size_ : 0);
  if (n_shared > from.blocks.size()) {
    return make_error(StatusCode::kOutOfRange, "fork: {} tokens is more than sequence {} holds",
                      n_tokens, parent);
  }
  Table table;
  table.blocks.assign(from.blocks.begin(), from.blocks.begin() + n_shared);
  table.hashes.assign(from.hashes.begin(),
                      from.hashes.begin() + std::min(n_shared, from.hashes.size()));
  for (int32_t block : table.blocks) retain(block);
  tables_.emplace(child, std::move(table));
  return Status::ok();
}

void BlockManager::free_sequence(SeqId seq) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  // Last block first: a prefix's tail is evicted before its head, which other prompts are
  // likelier to share.
  for (auto block = it->second.blocks.rbegin(); block != it->second.blocks.rend(); ++block)
    release(*block);
  tables_.erase(it);
}

const std::vector<int32_t>& BlockManager::block_table(SeqId seq) const {
  static const std::vector<int32_t> kEmpty;
  auto it = tables_.find(seq);
  return it == tables_.end() ? kEmpty : it->second.blocks;
}

int32_t BlockManager::attach_cached_prefix(SeqId seq, std::span<const int32_t> tokens,
                                           int32_t max_tokens) {
  assert(tables_.count(seq) == 0);
  if (!prefix_caching_) return 0;
  const auto bs = static_cast<size_t>(block_size_);
  const size_t n_whole =
      static_cast<size_t>(std::max(0, std::min(max_tokens, static_cast<int32_t>(tokens.size())))) /
      bs;
  Table table;
  uint64_t parent = PrefixCache::kRootHash;
  for (size_t i = 0; i < n_whole; ++i) {
    const std::span<const int32_t> block_tokens = tokens.subspan(i * bs, bs);
    const uint64_t hash = PrefixCache::chain_hash(parent, block_tokens);
    const int32_t block = cache_.find(hash, parent, block_tokens);
    if (block < 0) break;
    if (cache_.parked(block)) {
      cache_.unpark(block);
      ref_counts_[block] = 1;
    } else {
      retain(block);
    }
    table.blocks.push_back(block);
    table.hashes.push_back(hash);
    parent = hash;
  }
  const auto n_cached = static_cast<int32_t>(table.blocks.size()) * block_size_;
  if (!table.blocks.empty()) tables_.emplace(seq, std::move(table));
  return n_cached;
}

void BlockManager::commit_computed(SeqId seq, std::span<const int32_t> tokens, int32_t n_computed) {
  if (!prefix_caching_) return;
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  Table& table = it->second;
  const auto bs = static_cast<size_t>(block_size_);
  const size_t n_full = std::min(static_cast<size_t>(std::max(0, n_computed)), tokens.size()) / bs;
  while (table.hashes.size() < std::min(n_full, table.blocks.size())) {
    const size_t i = table.hashes.size();
    const uint64_t parent = i == 0 ? PrefixCache::kRootHash : table.hashes[i - 1];
    const std::span<const int32_t> block_tokens = tokens.subspan(i * bs, bs);
    const uint64_t hash = PrefixCache::chain_hash(parent, block_tokens);
    const int32_t block = table.blocks[i];
    // A block taken from the cache is indexed already; a duplicate of an indexed block (the
    // same prefix computed by two sequences at once) stays private and is freed normally.
    if (!cache_.indexed(block)) cache_.insert(block, hash, parent, block_tokens);
    table.hashes.push_back(hash);
  }
}

}  // namespace llamaserve
