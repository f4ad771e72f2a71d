#include "backend/cuda/check.h"
#include "backend/cuda/formats.cuh"
#include "backend/cuda/repack.h"

namespace llamaserve::cuda {
namespace {

// One thread per block. Byte copies: GGUF blocks of 18/20/34/210 bytes have no alignment to
// exploit, and this runs once per weight at load.
__global__ void split_blocks_kernel(BlockSplit split, const uint8_t* __restrict__ src,
                                    int64_t n_blocks, int64_t blocks_per_row,
                                    uint8_t* __restrict__ quants, int64_t quant_row_bytes,
                                    uint8_t* __restrict__ scales, int64_t scale_row_bytes) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_blocks) return;
  const int64_t row = i / blocks_per_row;
  const int64_t block = i % blocks_per_row;
  const uint8_t* in = src + i * split.block_bytes;
  uint8_t* body = quants + row * quant_row_bytes + block * split.body_bytes;
  uint8_t* scale = scales + row * scale_row_bytes + block * split.scale_bytes;
  for (int j = 0; j < split.body_bytes; ++j) body[j] = in[split.body_offset + j];
  for (int j = 0; j < split.scale_bytes; ++j) scale[j] = in[split.scale_offset + j];
}

// One thread per word of codes.
__global__ void pair_order_codes_kernel(PairOrderCodes codes, uint8_t* __restrict__ quants,
                                        int64_t n_words, int64_t blocks_per_row,
                                        int64_t quant_row_bytes) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_words) return;
  auto* w = reinterpret_cast<uint32_t*>(
      quants + pair_order_word_offset(codes, i, blocks_per_row, quant_row_bytes));
  *w = swap_middle_bytes(*w);
}

}  // namespace

Status launch_pair_order_codes(const PairOrderCodes& codes, uint8_t* quants, int64_t n_rows,
                               int64_t blocks_per_row, int64_t quant_row_bytes,
                               cudaStream_t stream) {
  LS_CUDA_REQUIRE(blocks_per_row > 0 && n_rows > 0 && quant_row_bytes % 4 == 0);
  LS_CUDA_REQUIRE(codes.block_bytes % 4 == 0 && codes.offset % 4 == 0 && codes.bytes % 4 == 0);
  const int64_t n_words = n_rows * blocks_per_row * (codes.bytes / 4);
  constexpr int kThreads = 256;
  const int64_t grid = (n_words + kThreads - 1) / kThreads;
  LS_CUDA_REQUIRE(grid <= 0x7fffffff);
  pair_order_codes_kernel<<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(
      codes, quants, n_words, blocks_per_row, quant_row_bytes);
  LS_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status launch_split_blocks(const BlockSplit& split, const uint8_t* src, int64_t n_rows,
                           int64_t blocks_per_row, uint8_t* quants, int64_t quant_row_bytes,
                           uint8_t* scales, int64_t scale_row_bytes, cudaStream_t stream) {
  LS_CUDA_REQUIRE(split.body_bytes + split.scale_bytes <= split.block_bytes);
  LS_CUDA_REQUIRE(blocks_per_row > 0 && n_rows > 0);
  const int64_t n_blocks = n_rows * blocks_per_row;
  constexpr int kThreads = 256;
  const int64_t grid = (n_blocks + kThreads - 1) / kThreads;
  LS_CUDA_REQUIRE(grid <= 0x7fffffff);
  split_blocks_kernel<<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(
      split, src, n_blocks, blocks_per_row, quants, quant_row_bytes, scales, scale_row_bytes);
  LS_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

}  // namespace llamaserve::cuda
