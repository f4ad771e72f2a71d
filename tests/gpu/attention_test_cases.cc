#include "attention_test_cases.h"

#include "backend/cuda/attention_decode.h"

namespace llamaserve::cuda::testing {

// `c` over a Q8_0 cache, named `name`.
AttentionCase q8_cache(const char* name, AttentionCase c) {
  c.name = name;
  c.kv_type = KvType::kQ8_0;
  return c;
}

AttentionCase on_cuda_cores(const char* name, AttentionCase c) {
  c.name = name;
  c.decode_mma_group = kMaxDecodeGroup + 1;
  return c;
}

AttentionCase on_tensor_cores(const char* name, AttentionCase c) {
  c.name = name;
  c.decode_mma_group = 1;
  return c;
}

std::vector<AttentionCase> attention_cases() {
  return {
      AttentionCase{
          "DecodeGqa4Hd128", 128, 8, 2, {{0, 1}, {4, 1}, {129, 1}, {699, 1}, {1499, 1}}, 1},
      AttentionCase{
          "DecodeGqa4Hd128Split4", 128, 8, 2, {{0, 1}, {4, 1}, {129, 1}, {699, 1}, {1499, 1}}, 4},
      AttentionCase{"DecodeGqa3Hd64Split3", 64, 9, 3, {{0, 1}, {299, 1}, {1024, 1}}, 3},
      // Split tiles: each row its own splits (1, 1, 1, 3 and 12 of 256 positions; 1, 1, 2 and
      // 16 of 64), the last block of each row combining them.
      AttentionCase{"DecodeRowSplitsGqa4Hd128",
                    128,
                    8,
                    2,
                    {{0, 1}, {4, 1}, {129, 1}, {699, 1}, {2999, 1}},
                    1,
                    AttentionKernel::kAuto,
                    0,
                    false,
                    256},
      AttentionCase{"DecodeRowSplitsMhaHd64Settled",
                    64,
                    4,
                    4,
                    {{0, 1}, {62, 1}, {64, 1}, {1000, 1}},
                    1,
                    kDecode,
                    0,
                    true,
                    64},
      // One or two query vectors per KV head: groups of threads split the positions.
      AttentionCase{"DecodeMhaHd128", 128, 4, 4, {{0, 1}, {5, 1}, {130, 1}, {700, 1}}, 1},
      AttentionCase{"DecodeMhaHd128Split2", 128, 4, 4, {{0, 1}, {130, 1}, {700, 1}}, 2},
      AttentionCase{"DecodeMhaHd64", 64, 3, 3, {{3, 1}, {129, 1}, {333, 1}}, 1},
      AttentionCase{"DecodeGqa2Hd64", 64, 4, 2, {{0, 1}, {200, 1}, {257, 1}}, 1},
      // The decode cases above run on the decode kernel (kAuto, one row per tile); the same
      // shapes on the CUDA-core kernel, then the decode kernel by name on every group size it
      // is built for, with more splits than some contexts have positions (empty splits).
      AttentionCase{"CoresDecodeGqa4Hd128Split4",
                    128,
                    8,
                    2,
                    {{0, 1}, {4, 1}, {129, 1}, {699, 1}, {1499, 1}},
                    4,
                    kCudaCores},
      AttentionCase{
          "CoresDecodeMhaHd128", 128, 4, 4, {{0, 1}, {5, 1}, {130, 1}, {700, 1}}, 1, kCudaCores},
      AttentionCase{
          "CoresDecodeGqa3Hd64Split3", 64, 9, 3, {{0, 1}, {299, 1}, {1024, 1}}, 3, kCudaCores},
      AttentionCase{
          "DecodeKernelMhaHd64Split7", 64, 5, 5, {{0, 1}, {2, 1}, {97, 1}, {510, 1}}, 7, kDecode},
      AttentionCase{"DecodeKernelGqa5Hd64", 64, 10, 2, {{13, 1}, {77, 1}, {1000, 1}}, 1, kDecode},
      AttentionCase{
          "DecodeKernelGqa6Hd128Split3", 128, 12, 2, {{0, 1}, {63, 1}, {333, 1}}, 3, kDecode},
      AttentionCase{"DecodeKernelGqa7Hd64Split2", 64, 7, 1, {{6, 1}, {150, 1}}, 2, kDecode},
      AttentionCase{"DecodeKernelGqa8Hd128Split5",
                    128,
                    16,
                    2,
                    {{0, 1}, {16, 1}, {31, 1}, {255, 1}, {2047, 1}},
                    5,
                    kDecode},
      AttentionCase{
          "DecodeKernelGqa2Hd128Split16", 128, 4, 2, {{0, 1}, {9, 1}, {3000, 1}}, 16, kDecode},
      // Both block sizes of the decode kernel by name (small grids get 16 warps by default).
      on_cuda_cores("DecodeKernel4WarpsGqa4Hd128",
                    {"", 128, 8, 2, {{0, 1}, {700, 1}, {1499, 1}}, 1, kDecode, 4}),
      on_cuda_cores("DecodeKernel16WarpsGqa4Hd128Split2",
                    {"", 128, 8, 2, {{0, 1}, {31, 1}, {700, 1}, {1499, 1}}, 2, kDecode, 16}),
      AttentionCase{
          "DecodeKernel16WarpsMhaHd64", 64, 3, 3, {{5, 1}, {64, 1}, {1000, 1}}, 1, kDecode, 16},
      AttentionCase{"DecodeKernel8WarpsMhaHd128Split2",
                    128,
                    5,
                    5,
                    {{0, 1}, {77, 1}, {1200, 1}, {9, 1}},
                    2,
                    kDecode,
                    8},
      AttentionCase{
          "DecodeKernel8WarpsMhaHd64", 64, 3, 3, {{5, 1}, {64, 1}, {333, 1}}, 1, kDecode, 8},
      on_cuda_cores("DecodeKernel4WarpsGqa3Hd64Split3",
                    {"", 64, 9, 3, {{0, 1}, {299, 1}, {1024, 1}}, 3, kDecode, 4}),
      // The history loaded before the wait for write_kv: one run of positions per warp
      // (16 warps, splits of a short context), several runs (4 warps, long contexts), GQA.
      AttentionCase{"DecodeKernelSettled16WarpsMhaHd128Split4",
                    128,
                    5,
                    5,
                    {{0, 1}, {1, 1}, {37, 1}, {143, 1}},
                    4,
                    kDecode,
                    16,
                    true},
      on_cuda_cores("DecodeKernelSettled4WarpsGqa3Hd64Split3",
                    {"", 64, 9, 3, {{0, 1}, {15, 1}, {299, 1}, {1024, 1}}, 3, kDecode, 4, true}),
      AttentionCase{"DecodeSettledGqa4Hd128",
                    128,
                    8,
                    2,
                    {{0, 1}, {4, 1}, {129, 1}, {699, 1}, {1499, 1}},
                    1,
                    kDecode,
                    0,
                    true},
      // Grouped queries over an f16 cache take the tensor-core decode kernel: the cases above
      // with groups of 2 to 8 run there; the same on the CUDA-core decode kernel, which takes
      // them where KV blocks are no multiple of 16 positions.
      on_cuda_cores("DecodeCoresKernelGqa4Hd128Split4",
                    {"", 128, 8, 2, {{0, 1}, {4, 1}, {129, 1}, {699, 1}, {1499, 1}}, 4}),
      on_cuda_cores("DecodeCoresKernelGqa5Hd64",
                    {"", 64, 10, 2, {{13, 1}, {77, 1}, {1000, 1}}, 1, kDecode}),
      on_cuda_cores("DecodeCoresKernelGqa6Hd128Split3",
                    {"", 128, 12, 2, {{0, 1}, {63, 1}, {333, 1}}, 3, kDecode}),
      on_cuda_cores("DecodeCoresKernelGqa7Hd64Split2",
                    {"", 64, 7, 1, {{6, 1}, {150, 1}}, 2, kDecode}),
      on_cuda_cores("DecodeCoresKernelGqa8Hd128Split5",
                    {"", 128, 16, 2, {{0, 1}, {16, 1}, {31, 1}, {255, 1}, {2047, 1}}, 5, kDecode}),
      on_cuda_cores("DecodeCoresKernelGqa2Hd128Split16",
                    {"", 128, 4, 2, {{0, 1}, {9, 1}, {3000, 1}}, 16, kDecode}),
      on_cuda_cores("DecodeCoresKernelRowSplitsGqa4Hd128",
                    {"",
                     128,
                     8,
                     2,
                     {{0, 1}, {4, 1}, {129, 1}, {699, 1}, {2999, 1}},
                     1,
                     kAuto,
                     0,
                     false,
                     256}),
      [] {
        AttentionCase c{"DecodeBlocksOf8Gqa4Hd128", 128, 8, 2, {{0, 1}, {9, 1}, {700, 1}}, 2};
        c.block_size = 8;
        return c;
      }(),
      // The tensor-core decode kernel over an f16 cache: one query head a KV head too (4 and 8
      // warps), contexts around a run's end (16) and a round of 8 warps (128), every group's
      // columns, settled history, split tiles and KV blocks of 32 positions.
      on_tensor_cores("DecodeMmaMhaHd128",
                      {"", 128, 3, 3, {{5, 1}, {639, 1}, {1499, 1}}, 1, kDecode, 4}),
      on_tensor_cores("DecodeMmaManyWarpsMhaHd64Split2",
                      {"",
                       64,
                       3,
                       3,
                       {{0, 1}, {15, 1}, {16, 1}, {17, 1}, {126, 1}, {127, 1}, {128, 1}, {1000, 1}},
                       2,
                       kDecode,
                       8}),
      AttentionCase{"DecodeMmaGqa8Hd128Split3",
                    128,
                    16,
                    2,
                    {{0, 1}, {14, 1}, {15, 1}, {16, 1}, {33, 1}, {1000, 1}},
                    3,
                    kDecode,
                    4},
      AttentionCase{"DecodeMmaSettled4WarpsGqa3Hd64Split3",
                    64,
                    9,
                    3,
                    {{0, 1}, {15, 1}, {299, 1}, {1024, 1}},
                    3,
                    kDecode,
                    4,
                    true},
      AttentionCase{"DecodeMmaManyWarpsGqa8Hd64Split3Settled",
                    64,
                    16,
                    2,
                    {{5, 1}, {300, 1}, {1499, 1}},
                    3,
                    kDecode,
                    8,
                    true},
      AttentionCase{"DecodeMmaManyWarpsRowSplitsGqa3Hd128",
                    128,
                    9,
                    3,
                    {{0, 1}, {99, 1}, {700, 1}, {2999, 1}},
                    1,
                    kAuto,
                    8,
                    false,
                    100},
      AttentionCase{
          "DecodeMmaGqa5Hd64Split7", 64, 10, 2, {{0, 1}, {2, 1}, {97, 1}, {510, 1}}, 7, kDecode},
      [] {
        AttentionCase c{"DecodeMmaBlocksOf32Gqa4Hd128",       128, 8, 2,
                        {{0, 1}, {31, 1}, {32, 1}, {700, 1}}, 2};
        c.block_size = 32;
        return c;
      }(),
      AttentionCase{"PrefillGqa3Hd64", 64, 9, 3, {{40, 100}, {7, 1}}, 1},
      AttentionCase{"PrefillGqa3Hd64Split2", 64, 9, 3, {{40, 100}, {7, 1}}, 2},
      AttentionCase{"PrefillMhaHd128", 128, 4, 4, {{0, 70}}, 1},
      AttentionCase{"MixedGqa8Hd128", 128, 16, 2, {{0, 33}, {250, 1}, {17, 5}}, 1},
      // The tensor-core kernel (tiles of at least 16 query vectors, one split): prompts of 17,
      // 100 and 333 rows; chunks after cached positions that are not multiples of the block
      // size (16); several sequences in one batch, with decode rows (tiles of fewer than 16
      // query vectors, in a grid sized for more) among them.
      AttentionCase{"MmaPromptMhaHd128Rows17", 128, 4, 4, {{0, 17}}, 1, kTensorCores},
      AttentionCase{"MmaPromptGqa3Hd64Rows100", 64, 9, 3, {{0, 100}}, 1, kTensorCores},
      AttentionCase{"MmaPromptGqa4Hd128Rows333", 128, 8, 2, {{0, 333}}, 1, kTensorCores},
      AttentionCase{"MmaPromptGqa8Hd64Rows333", 64, 16, 2, {{0, 333}}, 1, kTensorCores},
      AttentionCase{"MmaChunkMhaHd64After21", 64, 4, 4, {{21, 100}}, 1, kTensorCores},
      AttentionCase{"MmaChunkGqa8Hd128After45", 128, 16, 2, {{45, 17}}, 1, kTensorCores},
      AttentionCase{"MmaChunkGqa4Hd64After300", 64, 8, 2, {{300, 333}}, 1, kTensorCores},
      AttentionCase{
          "MmaBatchGqa4Hd128", 128, 8, 2, {{0, 17}, {130, 100}, {5, 1}, {333, 3}}, 1, kTensorCores},
      AttentionCase{"MmaBatchMhaHd64", 64, 6, 6, {{0, 100}, {19, 17}, {700, 1}}, 1, kTensorCores},
      AttentionCase{
          "MmaBatchGqa3Hd128", 128, 6, 2, {{33, 333}, {0, 17}, {64, 40}}, 1, kTensorCores},
      // Split contexts on tensor cores (a chunk after a long cached prefix): more splits than
      // some contexts have chunks of 64 positions (empty splits), odd prefixes and rows.
      AttentionCase{"MmaSplit4MhaHd128After2000", 128, 4, 4, {{2000, 48}}, 4, kTensorCores},
      AttentionCase{"MmaSplit3Gqa4Hd64After777", 64, 8, 2, {{777, 33}}, 3, kTensorCores},
      AttentionCase{"MmaSplit8BatchGqa3Hd128",
                    128,
                    6,
                    2,
                    {{1500, 17}, {0, 40}, {90, 100}, {333, 1}},
                    8,
                    kTensorCores},
      AttentionCase{"AutoSplit2PrefillGqa3Hd64", 64, 9, 3, {{1200, 21}, {7, 1}}, 2},
      // A step's decode rows ahead of its prompt chunks: the decode kernel takes the leading
      // one-row tiles, the rest run in a second launch (CUDA cores where one split must also
      // write 8-bit output, tensor cores with splits).
      AttentionCase{"MixedDecodeFirstMhaHd128",
                    128,
                    4,
                    4,
                    {{250, 1}, {700, 1}, {5, 1}, {0, 33}, {17, 20}},
                    1},
      AttentionCase{
          "MixedDecodeFirstGqa4Hd64Split2", 64, 8, 2, {{1300, 1}, {3, 1}, {40, 100}, {0, 17}}, 2},
      // As the forward pass runs them: split counters (the reduction after the prompt tiles
      // leaves the decode rows), and the long decode cut into split tiles of its own (1, 1 and
      // 21 splits of 64 positions) ahead of prompt tiles with 3 and with 1 launch-wide splits.
      [] {
        AttentionCase c{"MixedCountersGqa4Hd64Split2",           64, 8, 2,
                        {{1300, 1}, {3, 1}, {40, 100}, {0, 17}}, 2};
        c.split_counters = true;
        return c;
      }(),
      AttentionCase{"MixedRowSplitsGqa4Hd128Split3",
                    128,
                    8,
                    2,
                    {{5, 1}, {60, 1}, {1300, 1}, {700, 130}, {0, 17}},
                    3,
                    kAuto,
                    0,
                    false,
                    64},
      AttentionCase{"MixedRowSplitsMhaHd128",
                    128,
                    4,
                    4,
                    {{5, 1}, {1300, 1}, {40, 70}},
                    1,
                    kAuto,
                    0,
                    false,
                    64},
      // A Q8_0 cache on every kernel: the decode kernel (splits, split tiles, settled history,
      // one block size), the CUDA-core kernel (decode rows, a prompt with 8-bit output), the
      // tensor-core kernel (prompts, chunks after odd prefixes, splits, batches) and a step
      // of both kinds.
      q8_cache("Q8DecodeGqa4Hd128",
               {"", 128, 8, 2, {{0, 1}, {4, 1}, {129, 1}, {699, 1}, {1499, 1}}, 1}),
      q8_cache("Q8DecodeKernelGqa3Hd64Split3",
               {"", 64, 9, 3, {{0, 1}, {299, 1}, {1024, 1}}, 3, kDecode, 4}),
      q8_cache("Q8DecodeRowSplitsMhaHd64Settled",
               {"", 64, 4, 4, {{0, 1}, {62, 1}, {64, 1}, {1000, 1}}, 1, kDecode, 0, true, 64}),
      q8_cache("Q8DecodeKernelGqa3Hd128Split2",
               {"", 128, 9, 3, {{0, 1}, {31, 1}, {700, 1}, {1499, 1}}, 2, kDecode, 4}),
      // The Q8_0 decode kernel takes runs of 16 positions and splits that start at multiples
      // of 16: contexts around a run's end, every group size's columns (1, 5, 8), more splits
      // than some contexts have runs (empty splits), settled history, and split tiles whose
      // rows' splits are not multiples of 16 positions.
      q8_cache(
          "Q8DecodeKernelGqa8Hd128Split3",
          {"", 128, 16, 2, {{0, 1}, {14, 1}, {15, 1}, {16, 1}, {33, 1}, {1000, 1}}, 3, kDecode, 4}),
      q8_cache("Q8DecodeKernelMhaHd128",
               {"", 128, 3, 3, {{5, 1}, {639, 1}, {1499, 1}}, 1, kDecode, 4}),
      // 16-warp blocks (where the blocks fit one wave): contexts around one run a warp (16) and
      // one round of the block's warps (256), splits, settled history and split tiles.
      q8_cache("Q8DecodeManyWarpsMhaHd128",
               {"",
                128,
                3,
                3,
                {{0, 1}, {15, 1}, {16, 1}, {17, 1}, {254, 1}, {255, 1}, {256, 1}, {1000, 1}},
                1,
                kDecode,
                16}),
      q8_cache("Q8DecodeManyWarpsGqa8Hd64Split3Settled",
               {"", 64, 16, 2, {{5, 1}, {300, 1}, {1499, 1}}, 3, kDecode, 16, true}),
      q8_cache("Q8DecodeManyWarpsRowSplitsGqa3Hd128",
               {"", 128, 9, 3, {{0, 1}, {99, 1}, {700, 1}, {2999, 1}}, 1, kAuto, 16, false, 100}),
      q8_cache("Q8DecodeKernelGqa5Hd64Split7",
               {"", 64, 10, 2, {{0, 1}, {2, 1}, {97, 1}, {510, 1}}, 7, kDecode}),
      q8_cache(
          "Q8DecodeKernelSettledGqa2Hd128Split4",
          {"", 128, 4, 2, {{0, 1}, {1, 1}, {37, 1}, {143, 1}, {2000, 1}}, 4, kDecode, 0, true}),
      // KV blocks of 8 positions: a Q8_0 cache's decode rows take the CUDA-core kernel.
      [] {
        AttentionCase c =
            q8_cache("Q8DecodeBlocksOf8Gqa4Hd128", {"", 128, 8, 2, {{0, 1}, {9, 1}, {700, 1}}, 2});
        c.block_size = 8;
        return c;
      }(),
      q8_cache("Q8DecodeRowSplitsGqa4Hd128", {"",
                                              128,
                                              8,
                                              2,
                                              {{0, 1}, {99, 1}, {100, 1}, {699, 1}, {2999, 1}},
                                              1,
                                              kAuto,
                                              0,
                                              false,
                                              100}),
      q8_cache("Q8CoresDecodeGqa4Hd128Split4",
               {"", 128, 8, 2, {{0, 1}, {4, 1}, {129, 1}, {699, 1}, {1499, 1}}, 4, kCudaCores}),
      q8_cache("Q8PrefillGqa3Hd64", {"", 64, 9, 3, {{40, 100}, {7, 1}}, 1}),
      q8_cache("Q8MmaPromptGqa4Hd128Rows333", {"", 128, 8, 2, {{0, 333}}, 1, kTensorCores}),
      q8_cache("Q8MmaChunkGqa4Hd64After300", {"", 64, 8, 2, {{300, 333}}, 1, kTensorCores}),
      q8_cache("Q8MmaSplit3Gqa4Hd64After777", {"", 64, 8, 2, {{777, 33}}, 3, kTensorCores}),
      q8_cache("Q8MmaBatchGqa3Hd128",
               {"", 128, 6, 2, {{33, 333}, {0, 17}, {64, 40}}, 1, kTensorCores}),
      q8_cache("Q8MixedDecodeFirstGqa4Hd64Split2",
               {"", 64, 8, 2, {{1300, 1}, {3, 1}, {40, 100}, {0, 17}}, 2}),
      q8_cache("Q8MixedRowSplitsGqa4Hd128Split2",
               {"", 128, 8, 2, {{5, 1}, {60, 1}, {1300, 1}, {700, 130}}, 2, kAuto, 0, false, 100})};
}

}  // namespace llamaserve::cuda::testing
