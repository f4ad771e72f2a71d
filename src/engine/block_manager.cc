#include "engine/block_manager.h"

#include <cassert>

namespace llamaserve {

BlockManager::BlockManager(int32_t n_blocks, int32_t block_size)
    : block_size_(block_size), ref_counts_(static_cast<size_t>(n_blocks), 0) {
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
  if (free_list_.empty()) {
    return make_error(StatusCode::kResourceExhausted, "all {} KV cache blocks are in use",
                      n_blocks());
  }
  int32_t block = free_list_.back();
  free_list_.pop_back();
  ref_counts_[block] = 1;
  return block;
}

void BlockManager::retain(int32_t block) {
  assert(block >= 0 && block < n_blocks() && ref_counts_[block] > 0);
  ++ref_counts_[block];
}

void BlockManager::release(int32_t block) {
  assert(block >= 0 && block < n_blocks() && ref_counts_[block] > 0);
  if (--ref_counts_[block] == 0) free_list_.push_back(block);
}

int32_t BlockManager::ref_count(int32_t block) const {
  if (block < 0 || block >= n_blocks()) return 0;
  return ref_counts_[block];
}

int32_t BlockManager::blocks_needed(SeqId seq, int32_t n_tokens) const {
  int32_t have = 0;
  if (auto it = tables_.find(seq); it != tables_.end())
    have = static_cast<int32_t>(it->second.size());
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
  std::vector<int32_t>& table = tables_[seq];
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
  size_t n_shared = static_cast<size_t>(n_tokens > 0 ? n_tokens / block_size_ : 0);
  if (n_shared > parent_it->second.size()) {
    return make_error(StatusCode::kOutOfRange, "fork: {} tokens is more than sequence {} holds",
                      n_tokens, parent);
  }
  std::vector<int32_t> table(parent_it->second.begin(), parent_it->second.begin() + n_shared);
  for (int32_t block : table) retain(block);
  tables_.emplace(child, std::move(table));
  return Status::ok();
}

void BlockManager::free_sequence(SeqId seq) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  for (int32_t block : it->second) release(block);
  tables_.erase(it);
}

const std::vector<int32_t>& BlockManager::block_table(SeqId seq) const {
  static const std::vector<int32_t> kEmpty;
  auto it = tables_.find(seq);
  return it == tables_.end() ? kEmpty : it->second;
}

}  // namespace llamaserve
