// Which shapes each attention kernel refuses when asked for by name, with a message and before
// any launch (the results of the shapes they take: attention_test.cc).
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/act_quant.h"
#include "backend/cuda/attention.h"
#include "backend/cuda/attention_decode.h"
#include "test_util.h"

namespace llamaserve::cuda::testing {
namespace {

class AttentionKernelChoiceTest : public GpuTest {};

// Asked for by name, the tensor-core kernel refuses what it does not handle (8-bit output of
// one split, tiles of fewer than 16 query vectors) with a message instead of computing
// something else; the refusal comes before any launch. So does the decode kernel (tiles of
// several rows, groups of more than 8 query heads).
TEST_F(AttentionKernelChoiceTest, TensorCoresRefuseShapesTheyDoNotHandle) {
  DeviceArray<float> q(4096), out(4096), partial(4096);
  DeviceArray<uint16_t> k_cache(4096), v_cache(4096);
  DeviceArray<int32_t> positions(std::vector<int32_t>{0}), seq_index(std::vector<int32_t>{0}),
      tables(std::vector<int32_t>{0});
  DeviceArray<AttentionTile> tiles(std::vector<AttentionTile>{{0, 1}});
  DeviceArray<uint8_t> out_q8(q8_rows_bytes(1, 1024));
  AttentionArgs a;
  a.q = q.get();
  a.q_stride = 1024;
  a.k_cache = k_cache.get();
  a.v_cache = v_cache.get();
  a.positions = positions.get();
  a.seq_index = seq_index.get();
  a.block_tables = tables.get();
  a.blocks_per_seq = 1;
  a.block_size = 16;
  a.tiles = tiles.get();
  a.n_tiles = 0;  // nothing would run even if accepted
  a.max_tile_rows = 16;
  a.n_head = 8;
  a.n_head_kv = 8;
  a.head_dim = 128;
  a.scale = 0.125f;
  a.out = out.get();
  a.out_stride = 1024;
  a.n_batch_rows = 16;
  a.kernel = AttentionKernel::kTensorCores;
  ASSERT_OK(attention(a, nullptr));  // 16 query vectors per tile, one split: accepted

  // Refused with kInvalidArgument and a message naming the kernel.
  auto expect_refused_by = [](const char* kernel, const AttentionArgs& args, const char* what) {
    const Status s = attention(args, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << what << ": " << s.to_string();
    EXPECT_NE(s.to_string().find(kernel), std::string::npos) << s.to_string();
  };
  auto expect_refused = [&](const AttentionArgs& args, const char* what) {
    expect_refused_by("tensor-core kernel", args, what);
  };
  AttentionArgs fewer = a;
  fewer.max_tile_rows = 15;
  expect_refused(fewer, "15 query vectors per tile");
  AttentionArgs gqa = a;
  gqa.max_tile_rows = 3;
  gqa.n_head_kv = 2;  // 3 rows x 4 query heads per KV head
  expect_refused(gqa, "12 query vectors per tile");
  AttentionArgs split = a;
  split.n_splits = 2;
  split.partial = partial.get();
  ASSERT_OK(attention(split, nullptr));  // splits: accepted
  AttentionArgs q8 = a;
  q8.out_q = q8_rows_view(out_q8.get(), 1, 1024);
  expect_refused(q8, "8-bit output of one split");
  AttentionArgs q8_split = split;
  q8_split.out_q = q8.out_q;
  ASSERT_OK(attention(q8_split, nullptr));  // the reduction writes the 8-bit blocks

  // The decode kernel by name: tiles of one row, up to 8 query heads per KV head.
  AttentionArgs decode = a;
  decode.kernel = AttentionKernel::kDecode;
  decode.max_tile_rows = 1;
  decode.n_head_kv = 1;  // 8 query heads per KV head
  ASSERT_OK(attention(decode, nullptr));
  auto expect_decode_refused = [&](const AttentionArgs& args, const char* what) {
    expect_refused_by("decode kernel", args, what);
  };
  AttentionArgs two_rows = decode;
  two_rows.max_tile_rows = 2;
  expect_decode_refused(two_rows, "tiles of two rows");
  AttentionArgs wide_group = decode;
  wide_group.n_head = 16;  // 16 query heads per KV head
  expect_decode_refused(wide_group, "16 query heads per KV head");
  // 8 query heads per KV head over an f16 cache: the tensor-core kernel, 4 or 8 warps per block.
  AttentionArgs many_warps = decode;
  many_warps.n_tiles = 1;  // the block size is checked before the launch
  many_warps.decode_warps = 16;
  expect_decode_refused(many_warps, "16 warps on tensor cores over an f16 cache");
  AttentionArgs mma_warps = decode;
  mma_warps.decode_warps = 8;
  ASSERT_OK(attention(mma_warps, nullptr));
  // The CUDA-core decode kernel: 8 warps for one query head per KV head only.
  AttentionArgs mid_warps = decode;
  mid_warps.n_tiles = 1;
  mid_warps.decode_warps = 8;
  mid_warps.decode_mma_group = kMaxDecodeGroup + 1;
  expect_decode_refused(mid_warps, "8 warps for 8 query heads per KV head");
  AttentionArgs odd_warps = decode;
  odd_warps.n_tiles = 1;
  odd_warps.decode_warps = 12;
  expect_decode_refused(odd_warps, "12 warps");
  // A Q8_0 cache's decode kernel: 4 or 16 warps for any group, KV blocks of a multiple of 16
  // positions.
  DeviceArray<uint16_t> scales(4096);
  AttentionArgs q8_decode = decode;
  q8_decode.kv_type = KvType::kQ8_0;
  q8_decode.k_scales = scales.get();
  q8_decode.v_scales = scales.get();
  ASSERT_OK(attention(q8_decode, nullptr));
  AttentionArgs q8_many_warps = q8_decode;
  q8_many_warps.decode_warps = 16;
  ASSERT_OK(attention(q8_many_warps, nullptr));
  AttentionArgs q8_mid_warps = q8_decode;
  q8_mid_warps.n_tiles = 1;
  q8_mid_warps.decode_warps = 8;
  expect_decode_refused(q8_mid_warps, "8 warps with a Q8_0 cache");
  AttentionArgs q8_small_blocks = q8_decode;
  q8_small_blocks.block_size = 8;
  expect_decode_refused(q8_small_blocks, "KV blocks of 8 positions with a Q8_0 cache");
}

// Which decode kernel a pass's decode rows take (decode_on_tensor_cores, read alike by attention()
// and the executor's splits): over a Q8_0 cache the tensor-core kernel; over an f16 cache from two
// query heads a KV head on, where the (row, KV head) pairs fit the SMs or outnumber eight 4-warp
// blocks an SM; KV blocks of other than a multiple of 16 positions never. Host code: no GPU.
TEST(DecodeKernelOnHost, TensorCoresWhereTheirBlocksFillTheSms) {
  constexpr int64_t kSms = 132;
  constexpr KvType kF16 = KvType::kF16, kQ8 = KvType::kQ8_0;
  for (const int64_t pairs : {int64_t{1}, kSms, kSms + 1, 8 * kSms, 8 * kSms + 1}) {
    EXPECT_TRUE(decode_on_tensor_cores(kQ8, 1, 16, pairs, kSms)) << pairs;
    EXPECT_TRUE(decode_on_tensor_cores(kQ8, 8, 32, pairs, kSms)) << pairs;
    EXPECT_FALSE(decode_on_tensor_cores(kQ8, 4, 8, pairs, kSms)) << pairs;
    EXPECT_FALSE(decode_on_tensor_cores(kF16, 1, 16, pairs, kSms)) << pairs;
    EXPECT_FALSE(decode_on_tensor_cores(kF16, 4, 24, pairs, kSms)) << pairs;
    const bool fills = pairs <= kSms || pairs > 8 * kSms;
    EXPECT_EQ(decode_on_tensor_cores(kF16, 2, 16, pairs, kSms), fills) << pairs;
    EXPECT_EQ(decode_on_tensor_cores(kF16, 8, 16, pairs, kSms), fills) << pairs;
    // decode_mma_group: 1 takes one query head a KV head too, kMaxDecodeGroup + 1 no group.
    EXPECT_EQ(decode_on_tensor_cores(kF16, 1, 16, pairs, kSms, 1), fills) << pairs;
    EXPECT_FALSE(decode_on_tensor_cores(kF16, 8, 16, pairs, kSms, kMaxDecodeGroup + 1)) << pairs;
  }
  // LLaMA-3-8B's eight KV heads on an H100: 16 sequences (128 pairs) and 256 (2048) on tensor
  // cores, 64 (512) on CUDA cores.
  EXPECT_TRUE(decode_on_tensor_cores(kF16, 4, 16, 16 * 8, kSms));
  EXPECT_FALSE(decode_on_tensor_cores(kF16, 4, 16, 64 * 8, kSms));
  EXPECT_TRUE(decode_on_tensor_cores(kF16, 4, 16, 256 * 8, kSms));
}

}  // namespace
}  // namespace llamaserve::cuda::testing
