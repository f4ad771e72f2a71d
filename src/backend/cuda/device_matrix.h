// Weight matrices on the device, in the layout the CUDA kernels read.
//
// A GGUF matrix is row-major [rows, cols], each row a sequence of blocks. The kernels read
// weights with 16-byte loads, one "unit" of quants per thread and step, so every row of quants
// must start 16-byte aligned and the quants of a unit must be 16 contiguous bytes. Blocks of
// 34 (Q8_0), 18 (Q4_0), 20 (Q4_1) and 210 (Q6_K) bytes break that, so at upload those types are
// split into a quant array and a scale array ("structure of arrays"); the others keep their
// GGUF bytes. Every quantized type's codes are kept in pair order: each word of codes as its
// bytes [b0, b2, b1, b3] (pair_order.h says why).
//
//   type   quants (per row)                            scales (per row)
//   F32    cols floats, row pitch padded to 16 bytes   -
//   F16    cols halves, row pitch padded to 16 bytes   -
//   BF16   cols bf16s, row pitch padded to 16 bytes    -
//   Q8_0   cols int8 (block b at 32 b)                 half d per block
//   Q4_0   cols/2 bytes, the 16 qs bytes of each block half d per block
//   Q4_1   cols/2 bytes, as Q4_0                       half2 (d, m) per block
//   Q4_K   the GGUF blocks (144 bytes)                 -
//   Q5_K   the GGUF blocks (176 bytes)                 -
//   Q6_K   208 bytes per block: ql, qh, scales         half d per block
//
// The total size is within 0.1% of the GGUF bytes (plus row padding for the float types).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "core/status.h"
#include "quant/types.h"

namespace llamaserve::cuda {

// A view of one matrix in device memory. Plain data: kernels take it by value.
struct DeviceMatrix {
  TensorType type = TensorType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  const uint8_t* quants = nullptr;  // row r at quants + r * quant_row_bytes (16-byte aligned)
  const uint8_t* scales = nullptr;  // row r at scales + r * scale_row_bytes; null if none
  int64_t quant_row_bytes = 0;
  int64_t scale_row_bytes = 0;
};

// Byte sizes of a matrix in the device layout.
struct DeviceMatrixLayout {
  int64_t quant_row_bytes = 0;
  int64_t scale_row_bytes = 0;
  uint64_t quant_bytes = 0;  // rows * quant_row_bytes
  uint64_t scale_bytes = 0;  // rows * scale_row_bytes
  // quant_bytes and scale_bytes, each rounded up to kDeviceAlignment.
  uint64_t total_bytes() const;
};

// Alignment of every allocation the CUDA backend makes.
inline constexpr uint64_t kDeviceAlignment = 256;

inline constexpr uint64_t align_up(uint64_t n, uint64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

// True for the weight types the CUDA kernels multiply with.
bool cuda_weight_type_supported(TensorType type);

// "<op>: the CUDA backend has no kernel for <type> weights" (kUnsupported).
Status unsupported_weight_type(TensorType type, const char* op);

// The layout of a rows × cols matrix of `type`, or an error when the type is not supported or
// cols is not a whole number of blocks.
Result<DeviceMatrixLayout> device_matrix_layout(TensorType type, int64_t rows, int64_t cols);

// Copies a GGUF matrix from host memory into device memory at `dst` (layout.total_bytes()
// bytes, kDeviceAlignment aligned), converting it to the device layout, and returns the view.
// Types that are split into quants and scales go through `staging`, a device buffer of
// staging_bytes (at least the bytes of one GGUF row); larger staging means fewer steps.
// Synchronous with respect to the host buffer: it may be freed when this returns.
Result<DeviceMatrix> upload_matrix(TensorType type, int64_t rows, int64_t cols,
                                   const void* host_data, uint8_t* dst, void* staging,
                                   size_t staging_bytes, cudaStream_t stream);

}  // namespace llamaserve::cuda
