// The cases of the attention kernels' test against its CPU reference (attention_test.cc): each a
// batch of sequences (tokens in the cache and new rows), the kernel and the geometry it runs in.
#pragma once

#include <utility>
#include <vector>

#include "backend/cuda/attention.h"

namespace llamaserve::cuda::testing {

struct AttentionCase {
  const char* name;
  int head_dim;
  int n_head;
  int n_head_kv;
  // Per sequence: tokens already in the cache, and new rows this batch adds after them.
  std::vector<std::pair<int, int>> seqs;
  int n_splits;
  AttentionKernel kernel = AttentionKernel::kAuto;
  int decode_warps = 0;  // the decode kernel's warps per block; 0: its own choice
  // AttentionArgs::earlier_kv_settled (one row per sequence): write_kv and the attention then
  // run on a created stream, where the attention is launched while write_kv still runs
  // (programmatic dependent launch) and loads the history before it waits.
  bool earlier_kv_settled = false;
  // > 0: each leading one-row tile (every row of a decode step, the decode rows ahead of a
  // mixed pass's prompt tiles) its own splits of this many positions (split tiles,
  // AttentionArgs::split_tiles), combined by the decode kernel through split counters; the
  // prompt tiles after them take n_splits.
  int row_split_positions = 0;
  KvType kv_type = KvType::kF16;
  int block_size = 16;  // positions per KV block
  // Split counters without split tiles, as the forward pass always gives them: the decode
  // kernel combines its rows' splits itself, and a mixed pass's reduction leaves those rows.
  bool split_counters = false;
  // AttentionArgs::decode_mma_group: from how many query heads a KV head an f16 cache's decode
  // rows take the tensor-core decode kernel.
  int decode_mma_group = kDecodeMmaGroup;
};

// `c` over a Q8_0 cache, named `name`.
AttentionCase q8_cache(const char* name, AttentionCase c);
// `c` with an f16 cache's decode rows on the CUDA-core decode kernel whatever the group (as KV
// blocks of other than a multiple of 16 positions take them), named `name`.
AttentionCase on_cuda_cores(const char* name, AttentionCase c);
// `c` with an f16 cache's decode rows on the tensor-core decode kernel, one query head a KV head
// too, named `name`.
AttentionCase on_tensor_cores(const char* name, AttentionCase c);

constexpr AttentionKernel kAuto = AttentionKernel::kAuto;
constexpr AttentionKernel kTensorCores = AttentionKernel::kTensorCores;
constexpr AttentionKernel kCudaCores = AttentionKernel::kCudaCores;
constexpr AttentionKernel kDecode = AttentionKernel::kDecode;

// Every case: over an f16 cache (decode rows, split tiles, the CUDA-core and decode kernels by
// name, both decode kernels on every group, prefill, mixed passes, the tensor-core kernel), then
// over a Q8_0 cache.
std::vector<AttentionCase> attention_cases();

}  // namespace llamaserve::cuda::testing
