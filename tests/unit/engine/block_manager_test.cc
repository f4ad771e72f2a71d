#include "engine/block_manager.h"

#include <algorithm>
#include <random>
#include <set>

#include <gtest/gtest.h>

namespace llamaserve {
namespace {

TEST(BlockManagerTest, AllocatesUntilExhaustedThenReports) {
  BlockManager blocks(3, 16);
  EXPECT_EQ(blocks.n_free(), 3);
  std::set<int32_t> got;
  for (int i = 0; i < 3; ++i) {
    auto block = blocks.allocate();
    ASSERT_TRUE(block.is_ok());
    got.insert(*block);
  }
  EXPECT_EQ(got, (std::set<int32_t>{0, 1, 2}));
  EXPECT_EQ(blocks.n_free(), 0);
  auto none = blocks.allocate();
  ASSERT_FALSE(none.is_ok());
  EXPECT_EQ(none.status().code(), StatusCode::kResourceExhausted);
  blocks.release(1);
  EXPECT_EQ(blocks.n_free(), 1);
  EXPECT_EQ(*blocks.allocate(), 1);
}

TEST(BlockManagerTest, BlocksForTokensRoundsUp) {
  BlockManager blocks(8, 16);
  EXPECT_EQ(blocks.blocks_for_tokens(0), 0);
  EXPECT_EQ(blocks.blocks_for_tokens(1), 1);
  EXPECT_EQ(blocks.blocks_for_tokens(16), 1);
  EXPECT_EQ(blocks.blocks_for_tokens(17), 2);
}

TEST(BlockManagerTest, ReserveGrowsTablesAllOrNothing) {
  BlockManager blocks(4, 4);
  EXPECT_EQ(blocks.blocks_needed(7, 5), 2);
  ASSERT_TRUE(blocks.reserve(7, 5).is_ok());
  EXPECT_EQ(blocks.block_table(7).size(), 2u);
  EXPECT_EQ(blocks.blocks_needed(7, 8), 0);
  EXPECT_EQ(blocks.blocks_needed(7, 9), 1);
  ASSERT_TRUE(blocks.reserve(7, 8).is_ok());  // already covered: nothing allocated
  EXPECT_EQ(blocks.n_free(), 2);

  // Needs 3 more, only 2 free: nothing may change.
  Status status = blocks.reserve(8, 12);
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find("needs 3 more"), std::string::npos) << status.message();
  EXPECT_EQ(blocks.n_free(), 2);
  EXPECT_TRUE(blocks.block_table(8).empty());

  blocks.free_sequence(7);
  EXPECT_EQ(blocks.n_free(), 4);
  EXPECT_TRUE(blocks.block_table(7).empty());
  blocks.free_sequence(12345);  // unknown: ignored
  EXPECT_EQ(blocks.n_free(), 4);
}

TEST(BlockManagerTest, ForkSharesOnlyCompleteBlocks) {
  BlockManager blocks(8, 4);
  ASSERT_TRUE(blocks.reserve(1, 10).is_ok());  // 3 blocks, the last one partly filled
  const std::vector<int32_t> parent = blocks.block_table(1);
  ASSERT_TRUE(blocks.fork(1, 2, 10).is_ok());
  const std::vector<int32_t>& child = blocks.block_table(2);
  ASSERT_EQ(child.size(), 2u);
  EXPECT_EQ(child[0], parent[0]);
  EXPECT_EQ(child[1], parent[1]);
  EXPECT_EQ(blocks.ref_count(parent[0]), 2);
  EXPECT_EQ(blocks.ref_count(parent[2]), 1);
  EXPECT_EQ(blocks.n_free(), 5);

  // The child's next token goes to a block of its own.
  ASSERT_TRUE(blocks.reserve(2, 9).is_ok());
  EXPECT_NE(blocks.block_table(2)[2], parent[2]);

  blocks.free_sequence(1);
  EXPECT_EQ(blocks.ref_count(parent[0]), 1);
  EXPECT_EQ(blocks.n_free(), 5);  // parent's private block back; shared ones still held
  blocks.free_sequence(2);
  EXPECT_EQ(blocks.n_free(), 8);

  EXPECT_EQ(blocks.fork(99, 3, 4).code(), StatusCode::kNotFound);
  ASSERT_TRUE(blocks.reserve(4, 4).is_ok());
  EXPECT_EQ(blocks.fork(4, 4, 4).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(blocks.fork(4, 5, 100).code(), StatusCode::kOutOfRange);
}

// Random reserve/free/fork traffic: every block is either free or referenced exactly as
// many times as tables name it, and everything is free at the end.
TEST(BlockManagerTest, RandomTrafficKeepsCountsConsistent) {
  BlockManager blocks(32, 4);
  std::mt19937 rng(7);
  std::vector<SeqId> live;
  std::vector<int32_t> lengths(200, 0);
  SeqId next = 0;
  for (int iteration = 0; iteration < 5000; ++iteration) {
    int action = static_cast<int>(rng() % 4);
    if (action == 0 || live.empty()) {
      SeqId id = next++ % 200;
      if (std::find(live.begin(), live.end(), id) != live.end()) continue;
      int32_t n = 1 + static_cast<int32_t>(rng() % 20);
      if (blocks.reserve(id, n).is_ok()) {
        live.push_back(id);
        lengths[id] = n;
      }
    } else if (action == 1) {
      SeqId id = live[rng() % live.size()];
      int32_t n = lengths[id] + 1 + static_cast<int32_t>(rng() % 6);
      if (blocks.reserve(id, n).is_ok()) lengths[id] = n;
    } else if (action == 2) {
      size_t index = rng() % live.size();
      blocks.free_sequence(live[index]);
      live.erase(live.begin() + static_cast<ptrdiff_t>(index));
    } else {
      SeqId parent = live[rng() % live.size()];
      SeqId child = next++ % 200;
      if (std::find(live.begin(), live.end(), child) != live.end()) continue;
      if (blocks.fork(parent, child, lengths[parent]).is_ok()) {
        live.push_back(child);
        lengths[child] = lengths[parent] / 4 * 4;
      }
    }
    std::vector<int32_t> refs(32, 0);
    for (SeqId id : live) {
      for (int32_t block : blocks.block_table(id)) ++refs[block];
    }
    int32_t n_free = 0;
    for (int32_t block = 0; block < 32; ++block) {
      ASSERT_EQ(blocks.ref_count(block), refs[block]);
      n_free += refs[block] == 0;
    }
    ASSERT_EQ(blocks.n_free(), n_free);
  }
  for (SeqId id : live) blocks.free_sequence(id);
  EXPECT_EQ(blocks.n_free(), 32);
  EXPECT_EQ(blocks.n_sequences(), 0);
}

}  // namespace
}  // namespace llamaserve
