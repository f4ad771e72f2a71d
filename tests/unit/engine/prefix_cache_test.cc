// Prefix caching in the KV bookkeeping: the content index (PrefixCache), the blocks it keeps
// reusable in the BlockManager, and the scheduler starting sequences after their cached prefix.
#include "engine/prefix_cache.h"

#include <map>
#include <numeric>
#include <random>

#include <gtest/gtest.h>

#include "engine/block_manager.h"
#include "engine/scheduler.h"

namespace llamaserve {
namespace {

std::vector<int32_t> iota_tokens(int32_t n, int32_t first) {
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

TEST(PrefixCacheTest, ChainHashDependsOnTokensOrderAndParent) {
  const std::vector<int32_t> a = {1, 2, 3, 4};
  const std::vector<int32_t> b = {1, 2, 4, 3};
  const uint64_t root = PrefixCache::kRootHash;
  EXPECT_EQ(PrefixCache::chain_hash(root, a), PrefixCache::chain_hash(root, a));
  EXPECT_NE(PrefixCache::chain_hash(root, a), PrefixCache::chain_hash(root, b));
  EXPECT_NE(PrefixCache::chain_hash(root, a), PrefixCache::chain_hash(root + 1, a));
  const std::vector<int32_t> negative = {-1, 2, 3, 4};
  EXPECT_NE(PrefixCache::chain_hash(root, a), PrefixCache::chain_hash(root, negative));
}

TEST(PrefixCacheTest, FindChecksTokensAndParentNotOnlyTheHash) {
  PrefixCache cache(4, 4);
  const std::vector<int32_t> tokens = {5, 6, 7, 8};
  const uint64_t hash = PrefixCache::chain_hash(PrefixCache::kRootHash, tokens);
  ASSERT_TRUE(cache.insert(2, hash, PrefixCache::kRootHash, tokens));
  EXPECT_TRUE(cache.indexed(2));
  EXPECT_EQ(cache.find(hash, PrefixCache::kRootHash, tokens), 2);
  // The same hash with other tokens or another parent is a collision: a miss.
  const std::vector<int32_t> other = {5, 6, 7, 9};
  EXPECT_EQ(cache.find(hash, PrefixCache::kRootHash, other), -1);
  EXPECT_EQ(cache.find(hash, 12345, tokens), -1);
  // One block per hash.
  EXPECT_FALSE(cache.insert(3, hash, PrefixCache::kRootHash, tokens));
  EXPECT_FALSE(cache.indexed(3));
}

TEST(PrefixCacheTest, EvictsTheLeastRecentlyParked) {
  PrefixCache cache(3, 2);
  for (int32_t block = 0; block < 3; ++block) {
    const std::vector<int32_t> tokens = {block, block};
    ASSERT_TRUE(cache.insert(block, PrefixCache::chain_hash(PrefixCache::kRootHash, tokens),
                             PrefixCache::kRootHash, tokens));
  }
  cache.park(1);
  cache.park(0);
  cache.park(2);
  cache.unpark(0);  // taken back by a sequence
  EXPECT_EQ(cache.n_parked(), 2);
  EXPECT_EQ(cache.evict_oldest(), 1);
  EXPECT_FALSE(cache.indexed(1));
  const std::vector<int32_t> tokens1 = {1, 1};
  EXPECT_EQ(cache.find(PrefixCache::chain_hash(PrefixCache::kRootHash, tokens1),
                       PrefixCache::kRootHash, tokens1),
            -1);
  EXPECT_EQ(cache.evict_oldest(), 2);
  EXPECT_EQ(cache.evict_oldest(), -1);
  EXPECT_TRUE(cache.indexed(0));
}

TEST(BlockManagerPrefixTest, ComputedBlocksAreReusedAfterRelease) {
  BlockManager blocks(8, 4, /*prefix_caching=*/true);
  const std::vector<int32_t> prompt = iota_tokens(10, 100);
  ASSERT_TRUE(blocks.reserve(1, 10).is_ok());
  const std::vector<int32_t> first = blocks.block_table(1);
  blocks.commit_computed(1, prompt, 10);  // two full blocks, one partial
  blocks.free_sequence(1);
  EXPECT_EQ(blocks.n_free(), 8);
  EXPECT_EQ(blocks.n_cached_free(), 2);

  // At most 9 tokens may come from the cache: two whole blocks.
  EXPECT_EQ(blocks.attach_cached_prefix(2, prompt, 9), 8);
  EXPECT_EQ(blocks.block_table(2), std::vector<int32_t>(first.begin(), first.begin() + 2));
  EXPECT_EQ(blocks.n_cached_free(), 0);
  EXPECT_EQ(blocks.n_free(), 6);
  EXPECT_EQ(blocks.ref_count(first[0]), 1);
  ASSERT_TRUE(blocks.reserve(2, 10).is_ok());
  EXPECT_EQ(blocks.block_table(2).size(), 3u);

  // A third sequence shares the blocks the second holds.
  EXPECT_EQ(blocks.attach_cached_prefix(3, prompt, 9), 8);
  EXPECT_EQ(blocks.ref_count(first[0]), 2);
  // max_tokens below one block, and a prompt that differs in its first block: nothing.
  EXPECT_EQ(blocks.attach_cached_prefix(4, prompt, 3), 0);
  std::vector<int32_t> other = prompt;
  other[0] = 7;
  EXPECT_EQ(blocks.attach_cached_prefix(5, other, 9), 0);
  // A prompt that diverges in the second block gets the first only.
  other = prompt;
  other[6] = 7;
  EXPECT_EQ(blocks.attach_cached_prefix(6, other, 9), 4);
  EXPECT_EQ(blocks.block_table(6), std::vector<int32_t>{first[0]});
  for (SeqId seq : {2, 3, 6}) blocks.free_sequence(seq);
  EXPECT_EQ(blocks.n_free(), 8);
  EXPECT_EQ(blocks.evictions_total(), 0u);
}

TEST(BlockManagerPrefixTest, FreshBlocksFirstThenTheLeastRecentlyReleased) {
  BlockManager blocks(4, 2, /*prefix_caching=*/true);
  const std::vector<int32_t> a = iota_tokens(4, 0);
  const std::vector<int32_t> b = iota_tokens(4, 50);
  ASSERT_TRUE(blocks.reserve(1, 4).is_ok());
  blocks.commit_computed(1, a, 4);
  blocks.free_sequence(1);  // a's two blocks parked, its tail first
  ASSERT_TRUE(blocks.reserve(2, 4).is_ok());
  EXPECT_EQ(blocks.evictions_total(), 0u);  // two never-used blocks were left
  blocks.commit_computed(2, b, 4);
  blocks.free_sequence(2);
  EXPECT_EQ(blocks.n_cached_free(), 4);

  // One block more must evict a's tail (released first), keeping a's head and all of b.
  ASSERT_TRUE(blocks.reserve(3, 1).is_ok());
  EXPECT_EQ(blocks.evictions_total(), 1u);
  EXPECT_EQ(blocks.attach_cached_prefix(4, a, 3), 2);
  EXPECT_EQ(blocks.attach_cached_prefix(5, b, 3), 2);
  blocks.free_sequence(5);
  EXPECT_EQ(blocks.attach_cached_prefix(6, b, 4), 4);
}

TEST(BlockManagerPrefixTest, DuplicateComputationStaysPrivate) {
  BlockManager blocks(4, 2, /*prefix_caching=*/true);
  const std::vector<int32_t> prompt = iota_tokens(3, 9);
  // Two sequences compute the same prompt at once: the first to commit is indexed.
  ASSERT_TRUE(blocks.reserve(1, 3).is_ok());
  ASSERT_TRUE(blocks.reserve(2, 3).is_ok());
  blocks.commit_computed(1, prompt, 3);
  blocks.commit_computed(2, prompt, 3);
  const int32_t indexed = blocks.block_table(1)[0];
  blocks.free_sequence(2);
  EXPECT_EQ(blocks.n_cached_free(), 0);  // 2's copy went back as a plain free block
  blocks.free_sequence(1);
  EXPECT_EQ(blocks.n_cached_free(), 1);
  EXPECT_EQ(blocks.attach_cached_prefix(3, prompt, 2), 2);
  EXPECT_EQ(blocks.block_table(3)[0], indexed);
}

TEST(BlockManagerPrefixTest, OffMeansNoLookupAndNoIndex) {
  BlockManager blocks(4, 2);
  EXPECT_FALSE(blocks.prefix_caching());
  const std::vector<int32_t> prompt = iota_tokens(4, 1);
  ASSERT_TRUE(blocks.reserve(1, 4).is_ok());
  blocks.commit_computed(1, prompt, 4);
  blocks.free_sequence(1);
  EXPECT_EQ(blocks.n_cached_free(), 0);
  EXPECT_EQ(blocks.attach_cached_prefix(2, prompt, 3), 0);
  EXPECT_TRUE(blocks.block_table(2).empty());
}

// Random reserve / commit / attach / generate / free: reference counts always equal the number of
// tables naming each block, every block is either held, plainly free or cached, and a cached
// block always holds the tokens it is found by.
TEST(BlockManagerPrefixTest, RandomOperationsKeepTheInvariants) {
  constexpr int32_t kBlocks = 24;
  constexpr int32_t kBlockSize = 3;
  BlockManager blocks(kBlocks, kBlockSize, /*prefix_caching=*/true);
  std::mt19937 rng(11);
  // Prompts from a small alphabet share prefixes often.
  auto random_tokens = [&](int32_t n) {
    std::vector<int32_t> tokens;
    for (int32_t i = 0; i < n; ++i) tokens.push_back(static_cast<int32_t>(rng() % 2));
    return tokens;
  };
  struct Live {
    std::vector<int32_t> tokens;
    int32_t n_computed = 0;
  };
  std::map<SeqId, Live> live;
  // What each physical block holds, as the shadow of the KV cache: written when computed.
  std::vector<std::vector<int32_t>> contents(kBlocks);
  SeqId next = 1;
  for (int step = 0; step < 6000; ++step) {
    const int action = live.empty() ? 0 : static_cast<int>(rng() % 4);
    if (action == 0) {
      Live seq{random_tokens(1 + static_cast<int32_t>(rng() % 14)), 0};
      const SeqId id = next++;
      seq.n_computed =
          blocks.attach_cached_prefix(id, seq.tokens, static_cast<int32_t>(seq.tokens.size()) - 1);
      ASSERT_EQ(seq.n_computed % kBlockSize, 0);
      // The attached blocks hold exactly the prefix they were found by.
      const std::vector<int32_t>& table = blocks.block_table(id);
      for (int32_t b = 0; b < seq.n_computed / kBlockSize; ++b) {
        ASSERT_EQ(contents[table[b]],
                  std::vector<int32_t>(seq.tokens.begin() + b * kBlockSize,
                                       seq.tokens.begin() + (b + 1) * kBlockSize));
      }
      if (!blocks.reserve(id, static_cast<int32_t>(seq.tokens.size())).is_ok()) {
        blocks.free_sequence(id);
        continue;
      }
      live.emplace(id, std::move(seq));
    } else {
      auto it = std::next(live.begin(), static_cast<ptrdiff_t>(rng() % live.size()));
      const SeqId id = it->first;
      Live& seq = it->second;
      if (action == 1) {
        // Compute the rest: write the shadow contents, then commit.
        const std::vector<int32_t>& table = blocks.block_table(id);
        for (size_t t = static_cast<size_t>(seq.n_computed); t < seq.tokens.size(); ++t) {
          std::vector<int32_t>& block = contents[table[t / kBlockSize]];
          block.resize(kBlockSize, -1);
          ASSERT_EQ(blocks.ref_count(table[t / kBlockSize]), 1) << "writing a shared block";
          block[t % kBlockSize] = seq.tokens[t];
        }
        seq.n_computed = static_cast<int32_t>(seq.tokens.size());
        blocks.commit_computed(id, seq.tokens, seq.n_computed);
      } else if (action == 2) {
        blocks.free_sequence(id);
        live.erase(it);
      } else if (seq.n_computed == static_cast<int32_t>(seq.tokens.size())) {
        // Generate one token: the table grows by a block when the last one is full.
        if (blocks.reserve(id, seq.n_computed + 1).is_ok())
          seq.tokens.push_back(static_cast<int32_t>(rng() % 2));
      }
    }
    std::vector<int32_t> refs(kBlocks, 0);
    for (const auto& [id, seq] : live) {
      for (int32_t block : blocks.block_table(id)) ++refs[block];
    }
    int32_t n_unheld = 0;
    for (int32_t block = 0; block < kBlocks; ++block) {
      ASSERT_EQ(blocks.ref_count(block), refs[block]) << "block " << block << " step " << step;
      n_unheld += refs[block] == 0;
    }
    ASSERT_EQ(blocks.n_free(), n_unheld);
    ASSERT_LE(blocks.n_cached_free(), n_unheld);
  }
  for (const auto& [id, seq] : live) blocks.free_sequence(id);
  EXPECT_EQ(blocks.n_free(), kBlocks);
  EXPECT_GT(blocks.evictions_total(), 0u);
}

std::unique_ptr<Sequence> make_seq(SeqId id, std::vector<int32_t> tokens) {
  auto seq = std::make_unique<Sequence>();
  seq->id = id;
  seq->n_prompt = static_cast<int32_t>(tokens.size());
  seq->tokens = std::move(tokens);
  return seq;
}

void run_to_completion(Scheduler& scheduler, SeqId id) {
  while (true) {
    StepPlan plan = scheduler.schedule();
    ASSERT_FALSE(plan.empty());
    scheduler.complete(plan);
    Sequence* seq = scheduler.find(id);
    if (seq->n_pending() == 0) return;
  }
}

TEST(SchedulerPrefixTest, AdmissionStartsAfterTheCachedPrefix) {
  BlockManager blocks(16, 4, /*prefix_caching=*/true);
  Scheduler scheduler({/*max_running=*/4, /*max_batch_tokens=*/64}, blocks);
  const std::vector<int32_t> system = iota_tokens(12, 500);
  std::vector<int32_t> first = system;
  first.insert(first.end(), {1, 2, 3});
  scheduler.add(make_seq(1, first));
  run_to_completion(scheduler, 1);
  scheduler.remove(1);

  // Same 12-token system prompt, another question: three blocks come from the cache.
  std::vector<int32_t> second = system;
  second.insert(second.end(), {4, 5});
  scheduler.add(make_seq(2, second));
  StepPlan plan = scheduler.schedule();
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].seq->n_computed, 12);
  EXPECT_EQ(plan.chunks[0].n_tokens, 2);
  EXPECT_TRUE(plan.chunks[0].wants_logits);
  scheduler.complete(plan);

  // The identical prompt again: its last token is computed anew for its logits, so only
  // the blocks before it are reused.
  scheduler.add(make_seq(3, system));
  plan = scheduler.schedule();
  const ScheduledChunk* chunk = nullptr;
  for (const ScheduledChunk& c : plan.chunks) {
    if (c.seq->id == 3) chunk = &c;
  }
  ASSERT_NE(chunk, nullptr);
  EXPECT_EQ(chunk->seq->n_computed, 8);
  EXPECT_EQ(chunk->n_tokens, 4);

  const PrefixCacheStats& stats = scheduler.prefix_cache_stats();
  EXPECT_EQ(stats.queries, 3u);
  EXPECT_EQ(stats.query_tokens, 15u + 14u + 12u);
  EXPECT_EQ(stats.hit_tokens, 12u + 8u);
}

TEST(SchedulerPrefixTest, AFailedAdmissionGivesTheCachedBlocksBack) {
  BlockManager blocks(4, 4, /*prefix_caching=*/true);
  Scheduler scheduler({/*max_running=*/4, /*max_batch_tokens=*/64}, blocks);
  const std::vector<int32_t> prompt = iota_tokens(9, 1);
  scheduler.add(make_seq(1, prompt));
  run_to_completion(scheduler, 1);
  scheduler.remove(1);
  EXPECT_EQ(blocks.n_cached_free(), 2);

  // A running sequence takes three blocks (two of them evicted from the cache's LRU).
  scheduler.add(make_seq(2, iota_tokens(12, 900)));
  StepPlan plan = scheduler.schedule();
  ASSERT_EQ(plan.chunks.size(), 1u);
  scheduler.complete(plan);
  EXPECT_EQ(blocks.n_free(), 1);
  // The next one finds one cached block but needs two more than that: it waits, holding none.
  scheduler.add(make_seq(3, prompt));
  plan = scheduler.schedule();
  EXPECT_EQ(scheduler.n_waiting(), 1);
  EXPECT_EQ(scheduler.find(3)->n_computed, 0);
  EXPECT_TRUE(blocks.block_table(3).empty());
  EXPECT_EQ(blocks.n_free(), 1);
  EXPECT_EQ(scheduler.prefix_cache_stats().queries, 2u);
}

}  // namespace
}  // namespace llamaserve
