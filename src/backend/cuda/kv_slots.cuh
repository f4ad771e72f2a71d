// Where the KV cache writes put a batch row's K and V (attention.h): shared by write_kv and the
// fused RoPE write.
#pragma once

#include <cstdint>

#include "backend/cuda/attention.h"

namespace llamaserve::cuda {

// The cache slot (physical block * block_size + offset in the block) of row `row`'s position:
// its K and V start at slot * kv_dim in the layer's arrays.
__device__ __forceinline__ int64_t kv_row_slot(const KvWriteArgs& a, int64_t row) {
  const int pos = a.positions[row];
  const int64_t block = a.block_tables[static_cast<int64_t>(a.seq_index[row]) * a.blocks_per_seq +
                                       pos / a.block_size];
  return block * a.block_size + pos % a.block_size;
}

}  // namespace llamaserve::cuda
