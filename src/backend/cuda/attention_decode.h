// The decode attention kernels: every tile one batch row, so that a block holds the G <= 8 query
// heads of one KV head for one row and streams that row's K/V positions; attention_decode.cu for
// an f16 cache with one query head a KV head (CUDA cores), attention_decode_mma.cu for a Q8_0
// cache and an f16 cache's grouped queries (tensor cores; decode_on_tensor_cores). Internal to the
// CUDA backend: attention() (attention.cu) decides when they run and checks the common contract.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/cuda/attention.h"
#include "core/status.h"

namespace llamaserve::cuda {

// Query heads per KV head the decode kernel is built for.
inline constexpr int kMaxDecodeGroup = 8;

// Blocks per SM (kernel_bench's decode attention geometry table,
// bench/results/2026-12-04-h200-decode-attention-geometry.md): over an f16 cache the kernel takes
// 16 warps a block (one block an SM, 72 registers) for up to kDecodeManyWarpsGroup query heads a
// KV head where its blocks fit one wave of the SMs, else 4 warps a block (64 registers:
// kDecodeF16BlocksPerSm blocks an SM); the tensor-core kernel takes kDecodeQ8ManyWarps warps a
// block over a Q8_0 cache, kDecodeF16MmaManyWarps over an f16 one (one block an SM) for any group
// where its blocks fit one wave, else 4 (128 registers: kDecodeQ8BlocksPerSm blocks an SM; over
// an f16 cache their shared memory: kDecodeF16MmaBlocksPerSm). The executor's splits
// (executor/attention_splits.h) aim at one wave.
inline constexpr int kDecodeManyWarpsGroup = 4;
// 8 warps a block (64 registers: kDecodeMidWarpsBlocksPerSm blocks an SM) for up to
// kDecodeMidWarpsGroup query heads a KV head where those blocks fit one wave and 16-warp ones do
// not: as many warps an SM as 4-warp blocks in two waves, each walking half the positions.
inline constexpr int kDecodeMidWarpsGroup = 1;
inline constexpr int kDecodeMidWarpsBlocksPerSm = 4;
inline constexpr int kDecodeF16BlocksPerSm = 8;
inline constexpr int kDecodeQ8BlocksPerSm = 4;
inline constexpr int kDecodeQ8ManyWarps = 16;
// Over an f16 cache a warp's stages take 16 KB: three blocks of 4 warps an SM, or one of 8 (256
// sequences of 640 positions over 8 KV heads 240 us against 259 in four blocks of 3 warps an SM:
// bench/results/2026-12-06-h100-f16-decode-mma-3-warps.md).
inline constexpr int kDecodeF16MmaBlocksPerSm = 3;
inline constexpr int kDecodeF16MmaManyWarps = 8;

// Positions a warp of the tensor-core kernel takes at once; its splits start at multiples of it,
// and the KV block size must be one (attention() sends other block sizes of a Q8_0 cache to the
// CUDA-core kernel, of an f16 cache to attention_decode.cu).
inline constexpr int kDecodeMmaRun = 16;

// Positions a split of the tensor-core kernel's many-warp blocks takes at least: a run for each
// of a Q8_0 block's 16 warps, two for each of an f16 block's 8 (LLaMA-3-8B's 32 query heads over
// 8 KV heads at 1 x 2048 positions 10.0 us in 8 splits against 11.3 in 16:
// bench/results/2026-12-06-h100-decode-split-combine.md).
inline constexpr int kDecodeMmaSplitTokens = 256;

// Whether the decode rows of a pass, `pairs` (row, KV head) pairs on `sms` SMs with `group` query
// heads a KV head, run on the tensor-core kernel (KV blocks a multiple of its runs): over a Q8_0
// cache always; over an f16 cache from mma_group query heads a KV head on
// (AttentionArgs::decode_mma_group), where its 8-warp blocks fit one wave of the SMs or the
// CUDA-core kernel's 4-warp blocks do not. In between the CUDA-core kernel's blocks, eight an SM
// in one wave, keep more warps reading than the tensor-core kernel's three an SM (LLaMA-3-8B
// Q4_K_M at 64 sequences 7.77k against 7.58k tok/s; at 16 sequences 4.08k against 4.03k, at 256
// F16 22.0k against 20.3k: bench/results/2026-12-06-h100-f16-decode-mma-3-warps.md).
inline bool decode_on_tensor_cores(KvType type, int group, int block_size, int64_t pairs,
                                   int64_t sms, int mma_group = kDecodeMmaGroup) {
  if (block_size % kDecodeMmaRun != 0) return false;
  if (type == KvType::kQ8_0) return true;
  return group >= mma_group && (pairs <= sms || pairs > kDecodeF16BlocksPerSm * sms);
}

// PRECONDITIONS: as attention(), plus max_tile_rows == 1 and n_head / n_head_kv <=
// kMaxDecodeGroup. Explicitly instantiated for D = 64 and 128.
template <int D>
Status launch_attention_decode(const AttentionArgs& args, LaunchStream stream);  // f16 cache
template <int D>
Status launch_attention_decode_mma(const AttentionArgs& args, LaunchStream stream);  // either

// Raises the tensor-core decode kernel's shared-memory limits (part of
// configure_attention_kernels).
Status configure_attention_decode_mma_kernels();

}  // namespace llamaserve::cuda
