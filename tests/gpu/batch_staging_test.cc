// BatchStaging: which passes let the decode attention load cached K/V before its wait, and the
// split tiles of a decode step's long contexts.
#include <memory>
#include <vector>

#include "backend/cuda/attention.h"
#include "backend/cuda/cuda_state.h"
#include "backend/cuda/device_pool.h"
#include "batch_builders.h"
#include "test_util.h"

namespace llamaserve::cuda::testing {
namespace {

// A staging of 16 rows and 4 sequences.
class BatchStagingTest : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    auto pool = DevicePool::create(0, 16 << 20);
    ASSERT_TRUE(pool.is_ok()) << pool.status().to_string();
    pool_ = std::move(pool).value();
    CudaLimits limits;
    limits.max_tokens = 16;
    limits.max_seqs = 4;
    limits.max_blocks_per_seq = gpu_testing::kBlocksPerSeq;
    auto staging = BatchStaging::create(*pool_, limits);
    ASSERT_TRUE(staging.is_ok()) << staging.status().to_string();
    staging_ = std::move(staging).value();
  }
  std::unique_ptr<DevicePool> pool_;
  std::unique_ptr<BatchStaging> staging_;
};

TEST_F(BatchStagingTest, MarksPassesOfOneRowPerSequence) {
  using gpu_testing::build;
  auto stage = [&](const Batch& b, int32_t padded, int32_t split_row) {
    auto d = staging_->stage(b, padded, 16, 15, 8, nullptr, split_row);
    EXPECT_TRUE(d.is_ok()) << d.status().to_string();
    return d.is_ok() ? *d : DeviceBatch{};
  };
  // Decode rows of two sequences, padded to 4 rows (the padding rows share the scratch
  // sequence: they write nothing the others read).
  const DeviceBatch decode = stage(build({{0, {1}, 7}, {1, {1}, 30}}, 2), 4, 0);
  EXPECT_TRUE(decode.one_row_per_sequence);
  EXPECT_EQ(decode.max_tile_rows, 1);
  // Two rows of one sequence: one tile of two rows.
  const DeviceBatch chunk = stage(build({{0, {1, 1}, 5}}, 1), 2, 0);
  EXPECT_FALSE(chunk.one_row_per_sequence);
  EXPECT_EQ(chunk.max_tile_rows, 2);
  // The same split between its rows: tiles of one row, but the second row's attention reads the
  // position the first one writes in this pass.
  const DeviceBatch split = stage(build({{0, {1, 1}, 5}}, 1), 2, 1);
  EXPECT_FALSE(split.one_row_per_sequence);
  EXPECT_EQ(split.max_tile_rows, 1);
  // Rows of one sequence apart (another sequence between them).
  const DeviceBatch apart = stage(build({{0, {1}, 5}, {1, {1}, 2}, {0, {1}, 6}}, 2), 3, 0);
  EXPECT_FALSE(apart.one_row_per_sequence);
  ASSERT_CUDA(cudaDeviceSynchronize());
}

// With split_positions, a decode step's rows (or the decode rows ahead of a prompt chunk) are
// cut into tiles of their own splits (the long context into several, the short one whole);
// prompt chunks are not, and a cut that would not fit the staging is refused.
TEST_F(BatchStagingTest, CutsDecodeContextsIntoSplitTiles) {
  using gpu_testing::build;
  // Contexts 8 and 31 in splits of 8 positions: 1 and 4 tiles.
  auto d = staging_->stage(build({{0, {1}, 7}, {1, {1}, 30}}, 2), 2, 16, 15, 8, nullptr, 0, 8);
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  EXPECT_EQ(d->n_tiles, 5);
  EXPECT_EQ(d->max_row_splits, 4);
  EXPECT_EQ(d->leading_single_row_tiles, 5);
  EXPECT_EQ(d->max_tile_rows, 1);
  std::vector<AttentionTile> tiles(5);
  ASSERT_CUDA(
      cudaMemcpy(tiles.data(), d->tiles, 5 * sizeof(AttentionTile), cudaMemcpyDeviceToHost));
  const int32_t want[5][4] = {{0, 1, 0, 1}, {1, 1, 0, 4}, {1, 1, 1, 4}, {1, 1, 2, 4}, {1, 1, 3, 4}};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(tiles[i].first_row, want[i][0]) << "tile " << i;
    EXPECT_EQ(tiles[i].n_rows, want[i][1]) << "tile " << i;
    EXPECT_EQ(tiles[i].split, want[i][2]) << "tile " << i;
    EXPECT_EQ(tiles[i].n_splits, want[i][3]) << "tile " << i;
  }
  // A prompt chunk (a tile of two rows) keeps its tiles.
  auto chunk = staging_->stage(build({{0, {1, 1}, 5}}, 1), 2, 16, 15, 8, nullptr, 0, 2);
  ASSERT_TRUE(chunk.is_ok()) << chunk.status().to_string();
  EXPECT_EQ(chunk->max_row_splits, 0);
  EXPECT_EQ(chunk->n_tiles, 1);
  // Decode rows ahead of a prompt chunk: the decode rows' tiles are cut, the chunk's tile
  // follows them whole.
  auto mixed = staging_->stage(build({{0, {1}, 7}, {1, {1}, 30}, {2, {1, 1, 1}, 3}}, 3), 5, 16, 15,
                               8, nullptr, 0, 8);
  ASSERT_TRUE(mixed.is_ok()) << mixed.status().to_string();
  EXPECT_EQ(mixed->n_tiles, 6);
  EXPECT_EQ(mixed->max_row_splits, 4);
  EXPECT_EQ(mixed->leading_single_row_tiles, 5);
  EXPECT_EQ(mixed->leading_single_rows, 2);
  EXPECT_EQ(mixed->max_tile_rows, 3);
  std::vector<AttentionTile> mixed_tiles(6);
  ASSERT_CUDA(cudaMemcpy(mixed_tiles.data(), mixed->tiles, 6 * sizeof(AttentionTile),
                         cudaMemcpyDeviceToHost));
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(mixed_tiles[i].first_row, want[i][0]) << "tile " << i;
    EXPECT_EQ(mixed_tiles[i].split, want[i][2]) << "tile " << i;
    EXPECT_EQ(mixed_tiles[i].n_splits, want[i][3]) << "tile " << i;
  }
  EXPECT_EQ(mixed_tiles[5].first_row, 2);
  EXPECT_EQ(mixed_tiles[5].n_rows, 3);
  EXPECT_EQ(mixed_tiles[5].n_splits, 0);
  // 8 + 31 one-position splits exceed the 16 tiles the staging holds.
  EXPECT_FALSE(
      staging_->stage(build({{0, {1}, 7}, {1, {1}, 30}}, 2), 2, 16, 15, 8, nullptr, 0, 1).is_ok());
  ASSERT_CUDA(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace llamaserve::cuda::testing
