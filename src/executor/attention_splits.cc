#include "executor/attention_splits.h"

#include <algorithm>

namespace llamaserve {
namespace {

int64_t next_pow2(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

int32_t choose_attention_splits(const AttentionSplitShape& s) {
  int64_t max_len = 1, total_len = 0;
  for (const int32_t len : s.seq_lengths) {
    max_len = std::max<int64_t>(max_len, len);
    total_len += std::max(len, 0);
  }
  total_len = std::max(total_len, max_len);
  const int64_t sms = std::max(s.sm_count, 1);
  const int64_t heads = std::max(s.n_head_kv, 1);
  // The decode kernel's blocks the GPU runs at once (a decode step's tiles, or the decode rows
  // ahead of a mixed pass's prompt tiles).
  const int64_t decode_pairs =
      std::max<int64_t>(s.one_row_tiles ? s.n_tiles : s.single_row_tiles, 1) * heads;
  const int64_t mid_wave = std::max<int64_t>(s.decode_mid_blocks_per_sm, 1) * sms;
  const bool many_warps = s.decode_many_warps && decode_pairs <= sms;
  const int64_t wave = many_warps ? sms
                       : s.decode_mid_warps && decode_pairs <= mid_wave
                           ? mid_wave
                           : std::max<int64_t>(s.decode_blocks_per_sm, 1) * sms;
  int64_t fill = 1;
  if (s.one_row_tiles) {
    while (2 * fill * decode_pairs <= wave) fill *= 2;
  } else {
    const int64_t blocks = std::max<int64_t>(s.n_tiles - s.single_row_tiles, 1) * heads;
    while (2 * fill * blocks <= kPromptBlocksPerSm * sms) fill *= 2;
  }
  // Each of the `wave` blocks has total_len * heads / wave positions to walk on average; the
  // longest decode's split should be at most twice that (for contexts of one length never more
  // splits than the fill).
  const int64_t balance =
      s.max_decode_len > 0 ? ceil_div(s.max_decode_len * wave, 2 * total_len * heads) : 1;
  const int32_t split_tokens =
      !s.one_row_tiles                                 ? kPromptSplitTokens
      : many_warps && s.many_warps_split_tokens > 0    ? s.many_warps_split_tokens
      : many_warps && max_len <= kDecodeOneSplitTokens ? kDecodeOneSplitTokens
      : !many_warps && s.few_warps_split_tokens > 0    ? s.few_warps_split_tokens
                                                       : kDecodeSplitTokens;
  int64_t splits =
      std::min(std::max(fill, next_pow2(balance)), next_pow2(ceil_div(max_len, split_tokens)));
  while (splits > 1 && splits * s.n_rows > s.max_split_rows) splits /= 2;
  return static_cast<int32_t>(std::max<int64_t>(splits, 1));
}

int32_t choose_row_split_positions(const AttentionSplitShape& s) {
  const auto n = static_cast<int64_t>(s.seq_lengths.size());
  if (n < 2) return 0;
  int64_t max_len = 0, total_len = 0;
  for (const int32_t len : s.seq_lengths) {
    max_len = std::max<int64_t>(max_len, len);
    total_len += std::max(len, 0);
  }
  const int64_t others_mean = (total_len - max_len) / (n - 1);
  if (max_len < kRowSplitMinContext ||
      max_len < kRowSplitImbalance * std::max<int64_t>(others_mean, 1)) {
    return 0;
  }
  const int64_t heads = std::max(s.n_head_kv, 1);
  int64_t positions = std::max<int64_t>(
      kDecodeSplitTokens, ceil_div(total_len * heads, kBlocksPerSm * std::max(s.sm_count, 1)));
  // Within the partials' workspace and the staging's tiles: longer splits until both hold.
  while (true) {
    int64_t tiles = 0, most = 1;
    for (const int32_t len : s.seq_lengths) {
      const int64_t splits = std::max<int64_t>(1, ceil_div(len, positions));
      tiles += splits;
      most = std::max(most, splits);
    }
    if (most == 1) return 0;  // every row whole: nothing to cut
    if (most * std::max(n, s.n_rows) <= s.max_split_rows && tiles <= s.max_tiles) break;
    positions *= 2;
  }
  return static_cast<int32_t>(std::min<int64_t>(positions, 1 << 30));
}

}  // namespace llamaserve
