#include "executor/attention_splits.h"

#include <vector>

#include <gtest/gtest.h>

namespace llamaserve {
namespace {

constexpr int32_t kSms = 132;   // an H200
constexpr int32_t kHeads = 32;  // the 7B shape's KV heads

int64_t pow2_at_least(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// The decode kernel's blocks: over an f16 cache (the 7B shape's one query head a KV head) 16
// warps a block where they fit one wave, else 8 warps (4 blocks an SM) where those do, else 8
// blocks of 4 warps an SM; over a Q8_0 cache 16 warps (splits of 256 positions: a run of 16 a
// warp) where they fit one wave, else 4 blocks of 4 warps an SM.
struct DecodeBlocks {
  bool many_warps;
  bool mid_warps;
  int32_t per_sm;
  int32_t many_warps_split_tokens;
};
constexpr int32_t kMidPerSm = 4;
constexpr DecodeBlocks kF16Blocks{true, true, 8, 0};
constexpr DecodeBlocks kQ8Blocks{true, false, 4, 256};

// A decode step: one row (and tile) per sequence.
int32_t decode_splits(const std::vector<int32_t>& lengths, int64_t max_split_rows = 2048,
                      DecodeBlocks blocks = kF16Blocks) {
  AttentionSplitShape s;
  s.seq_lengths = lengths;
  for (const int32_t len : lengths) s.max_decode_len = std::max<int64_t>(s.max_decode_len, len);
  s.n_tiles = static_cast<int64_t>(lengths.size());
  s.n_rows = s.n_tiles;
  s.n_head_kv = kHeads;
  s.sm_count = kSms;
  s.one_row_tiles = true;
  s.max_split_rows = max_split_rows;
  s.decode_many_warps = blocks.many_warps;
  s.many_warps_split_tokens = blocks.many_warps_split_tokens;
  s.decode_mid_warps = blocks.mid_warps;
  s.decode_mid_blocks_per_sm = kMidPerSm;
  s.decode_blocks_per_sm = blocks.per_sm;
  return choose_attention_splits(s);
}

// Contexts of one length: as many blocks as one wave of the SMs holds (16-warp blocks one an SM
// while the sequences' heads fit the SMs, else 8-warp blocks four an SM while they fit those,
// else the 4-warp blocks an SM holds), no split under 64 positions, and none up to
// kDecodeOneSplitTokens positions in 16-warp blocks (over a Q8_0 cache none under 256 positions
// in 16-warp blocks).
TEST(AttentionSplits, EqualContextsFillOneWave) {
  for (const DecodeBlocks blocks : {kF16Blocks, kQ8Blocks}) {
    for (const int32_t n : {1, 2, 4, 16, 64, 256}) {
      for (const int32_t len : {1, 100, 2000, 8192}) {
        SCOPED_TRACE("sequences " + std::to_string(n) + ", context " + std::to_string(len) +
                     (blocks.many_warps_split_tokens == 0 ? ", f16" : ", q8_0"));
        const int64_t pairs = int64_t{n} * kHeads;
        const int64_t wave = blocks.many_warps && pairs <= kSms              ? kSms
                             : blocks.mid_warps && pairs <= kMidPerSm * kSms ? kMidPerSm * kSms
                                                                             : blocks.per_sm * kSms;
        int64_t fill = 1;
        while (2 * fill * pairs <= wave) fill *= 2;
        const bool many = blocks.many_warps && pairs <= kSms;
        const int64_t split_tokens = many && blocks.many_warps_split_tokens > 0
                                         ? blocks.many_warps_split_tokens
                                     : many && len <= kDecodeOneSplitTokens ? kDecodeOneSplitTokens
                                                                            : kDecodeSplitTokens;
        const int64_t by_length = pow2_at_least((len + split_tokens - 1) / split_tokens);
        EXPECT_EQ(decode_splits(std::vector<int32_t>(static_cast<size_t>(n), len), 2048, blocks),
                  std::min(fill, by_length));
      }
    }
  }
  // The shapes the kernel benchmark timed (one KV head a query head, f16): 1 x 2048 four splits
  // (128 blocks of 16 warps), 4 x 640 one (128), 16 x 640 one (512 blocks of 8 warps), 32 x 192
  // one; a Q8_0 cache's 1 x 2048 four (128 blocks of 16 warps, each warp two runs of 16
  // positions), 8 x 2048 two (512 blocks of 4 warps).
  EXPECT_EQ(decode_splits({2048}), 4);
  EXPECT_EQ(decode_splits(std::vector<int32_t>(4, 640)), 1);
  EXPECT_EQ(decode_splits(std::vector<int32_t>(16, 640)), 1);
  EXPECT_EQ(decode_splits(std::vector<int32_t>(16, 192)), 1);
  EXPECT_EQ(decode_splits(std::vector<int32_t>(32, 192)), 1);
  EXPECT_EQ(decode_splits({2048}, 2048, kQ8Blocks), 4);
  EXPECT_EQ(decode_splits(std::vector<int32_t>(8, 2048), 2048, kQ8Blocks), 2);
  // 16-warp blocks keep contexts of up to kDecodeOneSplitTokens whole; 4-warp blocks split them.
  EXPECT_EQ(decode_splits({64}), 1);
  EXPECT_EQ(decode_splits({65}), 1);
  EXPECT_EQ(decode_splits({128}), 1);
  EXPECT_EQ(decode_splits({129}), 4);
  EXPECT_EQ(decode_splits({100, 128}), 1);
  EXPECT_EQ(decode_splits({100}, 2048, kQ8Blocks), 1);
  EXPECT_EQ(decode_splits({256}, 2048, kQ8Blocks), 1);
  EXPECT_EQ(decode_splits({257}, 2048, kQ8Blocks), 2);
}

// The 70B shape's f16 cache (eight query heads a KV head: 4-warp blocks): splits of at least
// kGroupedDecodeSplitTokens positions, where splits of 64 would give four times as many for each
// head's last block to combine.
TEST(AttentionSplits, GroupedF16BlocksTakeLongerSplits) {
  auto splits = [](const std::vector<int32_t>& lengths, int32_t few_warps_split_tokens) {
    AttentionSplitShape s;
    s.seq_lengths = lengths;
    for (const int32_t len : lengths) s.max_decode_len = std::max<int64_t>(s.max_decode_len, len);
    s.n_tiles = static_cast<int64_t>(lengths.size());
    s.n_rows = s.n_tiles;
    s.n_head_kv = 8;
    s.sm_count = kSms;
    s.one_row_tiles = true;
    s.max_split_rows = 2048;
    s.decode_blocks_per_sm = 8;
    s.few_warps_split_tokens = few_warps_split_tokens;
    return choose_attention_splits(s);
  };
  EXPECT_EQ(splits({2048}, 0), 32);
  EXPECT_EQ(splits({2048}, kGroupedDecodeSplitTokens), 8);
  EXPECT_EQ(splits(std::vector<int32_t>(4, 2048), 0), 32);
  EXPECT_EQ(splits(std::vector<int32_t>(4, 2048), kGroupedDecodeSplitTokens), 8);
  EXPECT_EQ(splits({8192}, 0), 128);
  EXPECT_EQ(splits({8192}, kGroupedDecodeSplitTokens), 32);
  EXPECT_EQ(splits({200}, kGroupedDecodeSplitTokens), 1);
  EXPECT_EQ(splits({257}, kGroupedDecodeSplitTokens), 2);
}

// One long context among short ones: its blocks must not walk far more than the others' share.
TEST(AttentionSplits, OneLongContextIsSplitToItsShare) {
  std::vector<int32_t> lengths(63, 200);
  lengths.push_back(8192);
  const int32_t splits = decode_splits(lengths);
  EXPECT_EQ(splits, 8);
  // The long split against the average positions of the 8 x SMs 4-warp blocks in flight.
  const double share = (63.0 * 200 + 8192) * kHeads / (8.0 * kSms);
  EXPECT_LE(8192.0 / splits, 2 * share);
  EXPECT_GT(8192.0 / (splits / 2), 2 * share);
  // Over a Q8_0 cache (4 blocks an SM) half as many.
  EXPECT_EQ(decode_splits(lengths, 2048, kQ8Blocks), 4);
  // Equal short contexts alone keep one split (they fill the GPU).
  EXPECT_EQ(decode_splits(std::vector<int32_t>(64, 200)), 1);
  // The workspace bounds rows x splits.
  EXPECT_EQ(decode_splits(lengths, 256), 4);
  EXPECT_EQ(decode_splits(lengths, 128), 2);
  EXPECT_EQ(decode_splits(lengths, 64), 1);
}

// Prompt tiles without decodes: enough blocks to fill the GPU, no split under 512 positions.
TEST(AttentionSplits, PromptPassesFillTheGpu) {
  const std::vector<int32_t> one_prompt = {512};
  AttentionSplitShape s;
  s.seq_lengths = one_prompt;
  s.n_tiles = 8;
  s.n_rows = 512;
  s.n_head_kv = kHeads;
  s.sm_count = kSms;
  s.max_split_rows = 2048;
  EXPECT_EQ(choose_attention_splits(s), 1);
  // A 48-row chunk after a 2000-token cached prefix: one tile, split to fill the GPU.
  const std::vector<int32_t> cached = {2048};
  s.seq_lengths = cached;
  s.n_tiles = 1;
  s.n_rows = 48;
  EXPECT_EQ(choose_attention_splits(s), 4);  // 2048 / 512 positions
  // A 512-row chunk after 7680 positions: 256 blocks, one wave of two blocks an SM.
  const std::vector<int32_t> late = {8192};
  s.seq_lengths = late;
  s.n_tiles = 8;
  s.n_rows = 512;
  EXPECT_EQ(choose_attention_splits(s), 1);
  // A 256-row chunk: 128 blocks, two splits make one wave.
  s.n_tiles = 4;
  s.n_rows = 256;
  EXPECT_EQ(choose_attention_splits(s), 2);
}

// Decodes beside a prompt chunk: the chunk's tiles decide (the decode rows take a launch of
// their own), the split length still bounds them.
TEST(AttentionSplits, MixedPassesSplitTheChunksLaunch) {
  std::vector<int32_t> lengths(64, 200);
  lengths.push_back(8192);  // a 256-row chunk after 7936 positions
  AttentionSplitShape s;
  s.seq_lengths = lengths;
  s.max_decode_len = 200;
  s.n_tiles = 64 + 4;
  s.single_row_tiles = 64;
  s.n_rows = 64 + 256;
  s.n_head_kv = kHeads;
  s.sm_count = kSms;
  s.max_split_rows = 2048;
  EXPECT_EQ(choose_attention_splits(s), 2);
  // Early in the prompt the context is too short to split.
  lengths.back() = 256;
  EXPECT_EQ(choose_attention_splits(s), 1);
  // Counted as one launch, the 2176 blocks would have filled the GPU alone.
  lengths.back() = 8192;
  s.single_row_tiles = 0;
  EXPECT_EQ(choose_attention_splits(s), 1);
  // The workspace still bounds rows x splits.
  s.single_row_tiles = 64;
  s.max_split_rows = 320;
  EXPECT_EQ(choose_attention_splits(s), 1);
}

AttentionSplitShape row_split_shape(const std::vector<int32_t>& lengths) {
  AttentionSplitShape s;
  s.seq_lengths = lengths;
  s.n_head_kv = kHeads;
  s.sm_count = kSms;
  s.max_split_rows = 2048;
  s.max_tiles = 512;
  return s;
}

// One long decode among short ones: splits of about the GPU's per-block share; the long row is
// cut into many, the short ones stay whole.
TEST(RowSplits, OneLongContextIsCutTheShortOnesStayWhole) {
  std::vector<int32_t> lengths(63, 200);
  lengths.push_back(8192);
  const int32_t positions = choose_row_split_positions(row_split_shape(lengths));
  // (63 x 200 + 8192) x 32 heads / (8 x 132) positions a block.
  EXPECT_EQ(positions, (20792 * kHeads + kBlocksPerSm * kSms - 1) / (kBlocksPerSm * kSms));
  EXPECT_GT(positions, 200);                         // the short rows: one split each
  EXPECT_GE((8192 + positions - 1) / positions, 8);  // the long one: many
}

// Contexts of about one length, short contexts, and one sequence keep the launch-wide splits.
TEST(RowSplits, BalancedOrShortStepsKeepLaunchWideSplits) {
  EXPECT_EQ(choose_row_split_positions(row_split_shape(std::vector<int32_t>(64, 2000))), 0);
  std::vector<int32_t> mild(63, 1000);
  mild.push_back(3000);  // 3x the others' mean
  EXPECT_EQ(choose_row_split_positions(row_split_shape(mild)), 0);
  std::vector<int32_t> short_ones(63, 20);
  short_ones.push_back(900);  // long against the others, but short
  EXPECT_EQ(choose_row_split_positions(row_split_shape(short_ones)), 0);
  EXPECT_EQ(choose_row_split_positions(row_split_shape({8192})), 0);
}

// The workspace (rows x the largest row's splits) and the staging's tiles bound the cut.
TEST(RowSplits, LimitsLengthenTheSplits) {
  std::vector<int32_t> lengths(255, 100);
  lengths.push_back(100000);
  AttentionSplitShape s = row_split_shape(lengths);
  const int32_t free = choose_row_split_positions(s);
  ASSERT_GT(free, 0);
  s.max_split_rows = 256 * 4;  // at most 4 splits a row
  const int32_t bounded = choose_row_split_positions(s);
  EXPECT_GE(bounded, free);
  EXPECT_LE((100000 + bounded - 1) / bounded, 4);
  s.max_split_rows = 2048;
  s.max_tiles = 260;  // 255 whole rows and at most 5 splits of the long one
  const int32_t few_tiles = choose_row_split_positions(s);
  EXPECT_LE(255 + (100000 + few_tiles - 1) / few_tiles, 260);
}

// The decode rows of a mixed pass: the partials index every row of the pass, prompt rows too.
TEST(RowSplits, MixedPassesBoundTheSplitsByAllRows) {
  std::vector<int32_t> decodes(63, 200);
  decodes.push_back(8192);
  AttentionSplitShape s = row_split_shape(decodes);
  const int32_t alone = choose_row_split_positions(s);
  s.n_rows = 64 + 256;  // and a 256-row prompt chunk
  const int32_t mixed = choose_row_split_positions(s);
  ASSERT_GT(mixed, 0);
  EXPECT_GE(mixed, alone);
  EXPECT_LE((8192 + mixed - 1) / mixed * (64 + 256), 2048);
}

}  // namespace
}  // namespace llamaserve
