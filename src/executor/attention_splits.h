// How many flash-decoding splits a CUDA pass's attention takes: every (tile, KV head) is cut
// into that many blocks, each over a share of the context, their partials combined after.
// Plain arithmetic on the pass's shape, apart from the executor so that it is tested alone.
#pragma once

#include <cstdint>
#include <span>

namespace llamaserve {

// The pass and the limits both choices below read (choose_row_split_positions reads the
// decodes' contexts, the pass's rows, the GPU and the limits only).
struct AttentionSplitShape {
  std::span<const int32_t> seq_lengths;  // context of each sequence of the pass
  // The longest context of a sequence with one row in the pass (a decode), 0 for none.
  int64_t max_decode_len = 0;
  int64_t n_tiles = 0;  // query tiles (one per row in a decode step)
  // Of those, the leading one-row tiles of a pass that also has longer ones (decodes beside
  // prompt chunks): they run in a launch of the decode kernel of their own.
  int64_t single_row_tiles = 0;
  int64_t n_rows = 0;  // token rows of the pass (choose_row_split_positions: 0 = one a context)
  int32_t n_head_kv = 1;
  int32_t sm_count = 1;
  bool one_row_tiles = false;  // every tile one row: the decode kernel
  // The decode kernel's blocks (backend/cuda/attention_decode.h): many warps a block (16, or 8
  // for the tensor-core kernel over an f16 cache), one an SM, where the (tile, KV head) pairs fit
  // the SMs and it may (decode_many_warps); else 8 warps, decode_mid_blocks_per_sm an SM, where
  // the pairs fit those and it may (decode_mid_warps); else decode_blocks_per_sm blocks of 4
  // warps an SM.
  bool decode_many_warps = false;
  // The positions a split of many-warp blocks takes; 0: kDecodeSplitTokens, or one split up to
  // kDecodeOneSplitTokens (the f16 cache's CUDA-core kernel). The tensor-core kernel's warps take
  // runs of 16 positions: its splits are at least kDecodeMmaSplitTokens, a run or two a warp.
  int32_t many_warps_split_tokens = 0;
  // The positions a split of 4-warp decode blocks takes at least; 0: kDecodeSplitTokens. The
  // f16 cache's kernel with more than kDecodeManyWarpsGroup query heads a KV head (the 70B shape's
  // eight) takes kGroupedDecodeSplitTokens: its blocks' last one combines every split's partials
  // for all the group's heads.
  int32_t few_warps_split_tokens = 0;
  bool decode_mid_warps = false;
  int32_t decode_mid_blocks_per_sm = 1;
  int32_t decode_blocks_per_sm = 1;
  int64_t max_split_rows = 0;  // rows x splits the partials' workspace holds
  int64_t max_tiles = 0;       // split tiles the staging holds
};

// Context per split of prompt tiles, and of one-row tiles (one step of the decode kernel's 16
// warps; bench/results/2026-11-30-h200x2-decode-split-tokens.md).
inline constexpr int32_t kPromptSplitTokens = 512;
inline constexpr int32_t kDecodeSplitTokens = 64;
// Decode steps of 16-warp blocks whose contexts all fit this many positions take one split: at
// one sequence of 65-128 positions one split of 16 warps beats two of 64 positions (7B Q4_K_M
// +1.5-1.6%, Q8_0 +0.5%), while from 129 on four splits keep their lead over two (-1.3 to -1.9%
// with splits of 128 or 256; bench/results/2026-12-05-h100-decode-split-tokens-256.md,
// 2026-12-05-h100-decode-one-split-128.md).
inline constexpr int32_t kDecodeOneSplitTokens = 128;
// Splits of 4-warp f16 decode blocks with eight query heads a KV head (64 over 8, head_dim 128, on
// an H100, since the split combine reads eight splits at once): 1 x 2048 positions 36.6 us in 8
// splits against 47.3 in the 32 that splits of 64 positions give, 4 x 2048 54.7 in 8 against 72.7
// in 32, 1 x 8192 75.6 in 32 (bench/results/2026-12-06-h100-decode-split-combine.md).
inline constexpr int32_t kGroupedDecodeSplitTokens = 256;

// Blocks of the tensor-core attention kernel an SM holds at once (its shared memory: two).
inline constexpr int32_t kPromptBlocksPerSm = 2;

// A power of two (so that few CUDA graphs are captured), at least 1:
//   - a decode step: as many (tile, KV head, split) blocks as the SMs run in one wave, not more:
//     16-warp blocks one an SM, 8-warp blocks decode_mid_blocks_per_sm, 4-warp blocks
//     decode_blocks_per_sm (in waves a step waits for
//     its slowest blocks; 4 sequences of 640 positions 14.2 us in one split of 16-warp blocks
//     against 25.3 in the four that filled the GPU twice, 16 of 640 53.0 in two splits of 4-warp
//     blocks against 63.1 in one: bench/results/2026-12-04-h200-decode-attention-geometry.md);
//   - a pass with prompt tiles: as many splits as keep the tensor-core launch's blocks (the
//     prompt tiles' only) within one wave of the blocks the SMs hold at once, for a wave of
//     blocks that each walk a long context one chunk after another runs as long as its longest
//     block (a 256-row chunk after 8k positions: 128 blocks, 455 against 289 µs a layer with
//     two splits; bench/results/2026-12-03-h200-chunk-attention-splits.md);
//   - and, where sequences decode, enough that the longest decode's blocks take no more than
//     their share of the work: its split at most twice the per-block share of all contexts
//     over the decode blocks of one wave (one 8k-token sequence among 63 of 200 tokens would
//     otherwise walk 8k positions in one block per head while the rest of the GPU idles: a 7 ms
//     decode step became 28 ms); for contexts of one length this is the first rule;
//   - but no split shorter than the split tokens (none where 16-warp decode blocks meet
//     contexts of at most kDecodeOneSplitTokens; many_warps_split_tokens and
//     few_warps_split_tokens where the shape names them), and rows x splits within
//     max_split_rows.
int32_t choose_attention_splits(const AttentionSplitShape& shape);

// Decodes (seq_lengths: the contexts of a decode step's rows, or of the decode rows ahead of a
// mixed pass's prompt tiles) whose longest context is far longer than the others' (at least
// kRowSplitImbalance times their mean, and at least kRowSplitMinContext positions) cut each
// row's context into splits of its own (AttentionArgs::split_tiles): splits of the positions
// returned here, the long rows into many, the short ones whole, so that no block walks much
// more than the GPU's share per block of all contexts (kBlocksPerSm blocks of each SM
// streaming at once). The partials index every row of the pass (n_rows, when more than the
// decodes) and the staging holds max_tiles tiles. 0 for any other step: the launch-wide splits
// above (for a mixed pass, of its prompt tiles).
inline constexpr int64_t kRowSplitImbalance = 4;
inline constexpr int64_t kRowSplitMinContext = 1024;
inline constexpr int64_t kBlocksPerSm = 8;
int32_t choose_row_split_positions(const AttentionSplitShape& shape);

}  // namespace llamaserve
