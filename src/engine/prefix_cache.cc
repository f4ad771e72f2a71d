#include "engine/prefix_cache.h"

#include <algorithm>
#include <cassert>

namespace llamaserve {
namespace {

// splitmix64's finalizer: every input bit reaches every output bit.
uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace

uint64_t PrefixCache::chain_hash(uint64_t parent, std::span<const int32_t> block_tokens) {
  uint64_t hash = mix(parent ^ 0x9e3779b97f4a7c15ULL);
  for (int32_t token : block_tokens) hash = mix(hash + static_cast<uint32_t>(token));
  return hash;
}

PrefixCache::PrefixCache(int32_t n_blocks, int32_t block_size)
    : block_size_(block_size),
      entries_(static_cast<size_t>(n_blocks)),
      tokens_(static_cast<size_t>(n_blocks) * static_cast<size_t>(block_size)) {
  assert(n_blocks >= 0 && block_size >= 1);
}

std::span<const int32_t> PrefixCache::tokens_of(int32_t block) const {
  return {tokens_.data() + static_cast<size_t>(block) * static_cast<size_t>(block_size_),
          static_cast<size_t>(block_size_)};
}

int32_t PrefixCache::find(uint64_t hash, uint64_t parent,
                          std::span<const int32_t> block_tokens) const {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return -1;
  const int32_t block = it->second;
  const std::span<const int32_t> held = tokens_of(block);
  if (entries_[static_cast<size_t>(block)].parent != parent ||
      !std::equal(held.begin(), held.end(), block_tokens.begin(), block_tokens.end())) {
    return -1;
  }
  return block;
}

bool PrefixCache::insert(int32_t block, uint64_t hash, uint64_t parent,
                         std::span<const int32_t> block_tokens) {
  assert(static_cast<int32_t>(block_tokens.size()) == block_size_);
  Entry& entry = entries_[static_cast<size_t>(block)];
  assert(!entry.indexed);
  if (!by_hash_.emplace(hash, block).second) return false;
  entry.indexed = true;
  entry.hash = hash;
  entry.parent = parent;
  std::copy(block_tokens.begin(), block_tokens.end(),
            tokens_.begin() + static_cast<ptrdiff_t>(block) * block_size_);
  return true;
}

void PrefixCache::park(int32_t block) {
  Entry& entry = entries_[static_cast<size_t>(block)];
  assert(entry.indexed && !entry.parked);
  entry.parked = true;
  entry.lru_position = lru_.insert(lru_.end(), block);
}

void PrefixCache::unpark(int32_t block) {
  Entry& entry = entries_[static_cast<size_t>(block)];
  assert(entry.parked);
  entry.parked = false;
  lru_.erase(entry.lru_position);
}

int32_t PrefixCache::evict_oldest() {
  if (lru_.empty()) return -1;
  const int32_t block = lru_.front();
  lru_.pop_front();
  Entry& entry = entries_[static_cast<size_t>(block)];
  by_hash_.erase(entry.hash);
  entry = Entry{};
  return block;
}

}  // namespace llamaserve
