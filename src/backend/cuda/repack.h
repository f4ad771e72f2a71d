// Conversion of GGUF blocks to the device layout of device_matrix.h (the split quants/scales,
// Q4_K's order of codes). Internal.
#pragma once

#include <cstdint>
#include <optional>

#include <cuda_runtime_api.h>

#include "backend/cuda/pair_order.h"
#include "core/status.h"
#include "quant/types.h"

namespace llamaserve::cuda {

// How one GGUF block splits: body_bytes at body_offset go to the quant array, scale_bytes at
// scale_offset to the scale array.
struct BlockSplit {
  int block_bytes;
  int body_offset;
  int body_bytes;
  int scale_offset;
  int scale_bytes;
};

// How `type` splits, or nullopt for the types that keep their GGUF bytes.
std::optional<BlockSplit> block_split(TensorType type);

// Splits n_rows rows of blocks_per_row blocks each, read from `src` (GGUF rows, contiguous),
// into quants (row pitch quant_row_bytes) and scales (row pitch scale_row_bytes).
Status launch_split_blocks(const BlockSplit& split, const uint8_t* src, int64_t n_rows,
                           int64_t blocks_per_row, uint8_t* quants, int64_t quant_row_bytes,
                           uint8_t* scales, int64_t scale_row_bytes, cudaStream_t stream);

// Where a quantized type's codes lie, to be put in pair order (pair_order.h), or nullopt for the
// float types.
std::optional<PairOrderCodes> pair_order_codes(TensorType type);

// Puts the codes of n_rows rows of blocks_per_row blocks of device quants (row pitch
// quant_row_bytes) in place into pair order.
Status launch_pair_order_codes(const PairOrderCodes& codes, uint8_t* quants, int64_t n_rows,
                               int64_t blocks_per_row, int64_t quant_row_bytes,
                               cudaStream_t stream);

}  // namespace llamaserve::cuda
