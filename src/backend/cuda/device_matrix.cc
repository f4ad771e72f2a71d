#include "backend/cuda/device_matrix.h"

#include <algorithm>
#include <optional>

#include "backend/cuda/check.h"
#include "backend/cuda/repack.h"

namespace llamaserve::cuda {
namespace {

// Elements per 16-byte unit of the float types: their rows must be whole units.
int64_t float_unit_elems(TensorType type) {
  switch (type) {
    case TensorType::F32: return 4;
    case TensorType::F16:
    case TensorType::BF16: return 8;
    default: return 1;
  }
}

}  // namespace

// How the types that do not keep their GGUF bytes split a block (see device_matrix.h).
std::optional<BlockSplit> block_split(TensorType type) {
  switch (type) {
    case TensorType::Q8_0: return BlockSplit{34, 2, 32, 0, 2};
    case TensorType::Q4_0: return BlockSplit{18, 2, 16, 0, 2};
    case TensorType::Q4_1: return BlockSplit{20, 4, 16, 0, 4};
    case TensorType::Q6_K: return BlockSplit{210, 0, 208, 208, 2};
    default: return std::nullopt;
  }
}

// Where each quantized type's codes lie in its device blocks (device_matrix.h): the split quants
// of Q8_0, Q4_0 and Q4_1; Q4_K's and Q5_K's GGUF blocks past their 16 bytes of scales (Q5_K's
// high bits, then its low nibbles); Q6_K's ql and qh before its scales.
std::optional<PairOrderCodes> pair_order_codes(TensorType type) {
  switch (type) {
    case TensorType::Q8_0: return PairOrderCodes{32, 0, 32};
    case TensorType::Q4_0:
    case TensorType::Q4_1: return PairOrderCodes{16, 0, 16};
    case TensorType::Q4_K: return PairOrderCodes{144, 16, 128};
    case TensorType::Q5_K: return PairOrderCodes{176, 16, 160};
    case TensorType::Q6_K: return PairOrderCodes{208, 0, 192};
    default: return std::nullopt;
  }
}

uint64_t DeviceMatrixLayout::total_bytes() const {
  return align_up(quant_bytes, kDeviceAlignment) + align_up(scale_bytes, kDeviceAlignment);
}

Status unsupported_weight_type(TensorType type, const char* op) {
  const TypeTraits* t = type_traits(static_cast<uint32_t>(type));
  return make_error(StatusCode::kUnsupported, "{}: the CUDA backend has no kernel for {} weights",
                    op, t != nullptr ? t->name : "unknown");
}

bool cuda_weight_type_supported(TensorType type) {
  switch (type) {
    case TensorType::F32:
    case TensorType::F16:
    case TensorType::BF16:
    case TensorType::Q8_0:
    case TensorType::Q4_0:
    case TensorType::Q4_1:
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K: return true;
    default: return false;
  }
}

Result<DeviceMatrixLayout> device_matrix_layout(TensorType type, int64_t rows, int64_t cols) {
  if (!cuda_weight_type_supported(type))
    return unsupported_weight_type(type, "device_matrix_layout");
  const TypeTraits& t = traits(type);
  const int64_t unit = std::max<int64_t>(t.block_elems, float_unit_elems(type));
  if (rows <= 0 || cols <= 0 || cols % unit != 0) {
    return make_error(StatusCode::kInvalidArgument,
                      "a {} matrix on the GPU needs rows > 0 and a row length that is a multiple "
                      "of {}; got {} x {}",
                      t.name, unit, rows, cols);
  }
  const int64_t blocks = cols / t.block_elems;
  DeviceMatrixLayout layout;
  if (const std::optional<BlockSplit> split = block_split(type)) {
    layout.quant_row_bytes = blocks * split->body_bytes;
    layout.scale_row_bytes = blocks * split->scale_bytes;
  } else {
    layout.quant_row_bytes = static_cast<int64_t>(align_up(blocks * t.block_bytes, 16));
  }
  layout.quant_bytes = static_cast<uint64_t>(rows) * layout.quant_row_bytes;
  layout.scale_bytes = static_cast<uint64_t>(rows) * layout.scale_row_bytes;
  return layout;
}

namespace {

// The split of upload_matrix: GGUF rows through `staging` into quants and scales.
Status split_rows(const BlockSplit& split, TensorType type, int64_t rows, int64_t cols,
                  const uint8_t* src, size_t src_row_bytes, const DeviceMatrixLayout& layout,
                  uint8_t* quants, uint8_t* scales, void* staging, size_t staging_bytes,
                  cudaStream_t stream) {
  const int64_t rows_per_step = static_cast<int64_t>(staging_bytes / src_row_bytes);
  if (staging == nullptr || rows_per_step < 1) {
    return make_error(
        StatusCode::kInvalidArgument,
        "upload_matrix: staging buffer of {} bytes is smaller than one {} row ({} bytes)",
        staging_bytes, type_name(type), src_row_bytes);
  }
  auto* stage = static_cast<uint8_t*>(staging);
  for (int64_t row = 0; row < rows; row += rows_per_step) {
    const int64_t n = std::min(rows_per_step, rows - row);
    LS_CUDA_CHECK(cudaMemcpyAsync(stage, src + row * src_row_bytes, n * src_row_bytes,
                                  cudaMemcpyHostToDevice, stream));
    LS_RETURN_IF_ERROR(
        launch_split_blocks(split, stage, n, cols / traits(type).block_elems,
                            quants + row * layout.quant_row_bytes, layout.quant_row_bytes,
                            scales + row * layout.scale_row_bytes, layout.scale_row_bytes, stream));
  }
  return Status::ok();
}

}  // namespace

Result<DeviceMatrix> upload_matrix(TensorType type, int64_t rows, int64_t cols,
                                   const void* host_data, uint8_t* dst, void* staging,
                                   size_t staging_bytes, cudaStream_t stream) {
  LS_ASSIGN_OR_RETURN(const DeviceMatrixLayout layout, device_matrix_layout(type, rows, cols));
  if (reinterpret_cast<uintptr_t>(dst) % kDeviceAlignment != 0) {
    return make_error(StatusCode::kInvalidArgument, "upload_matrix: destination not aligned");
  }
  DeviceMatrix m;
  m.type = type;
  m.rows = rows;
  m.cols = cols;
  m.quants = dst;
  m.quant_row_bytes = layout.quant_row_bytes;
  m.scale_row_bytes = layout.scale_row_bytes;
  uint8_t* scales = dst + align_up(layout.quant_bytes, kDeviceAlignment);
  m.scales = layout.scale_bytes > 0 ? scales : nullptr;

  const size_t src_row_bytes = row_bytes(type, static_cast<size_t>(cols));
  const auto* src = static_cast<const uint8_t*>(host_data);
  const std::optional<BlockSplit> split = block_split(type);
  if (!split) {
    if (static_cast<size_t>(layout.quant_row_bytes) != src_row_bytes) {
      // Float rows padded to 16 bytes: zero the padding so that no kernel reads garbage.
      LS_CUDA_CHECK(cudaMemsetAsync(dst, 0, layout.quant_bytes, stream));
    }
    LS_CUDA_CHECK(cudaMemcpy2DAsync(dst, layout.quant_row_bytes, src, src_row_bytes, src_row_bytes,
                                    rows, cudaMemcpyHostToDevice, stream));
  } else {
    LS_RETURN_IF_ERROR(split_rows(*split, type, rows, cols, src, src_row_bytes, layout, dst, scales,
                                  staging, staging_bytes, stream));
  }
  if (const std::optional<PairOrderCodes> codes = pair_order_codes(type)) {
    LS_RETURN_IF_ERROR(launch_pair_order_codes(*codes, dst, rows, cols / traits(type).block_elems,
                                               layout.quant_row_bytes, stream));
  }
  LS_CUDA_CHECK(cudaStreamSynchronize(stream));
  return m;
}

}  // namespace llamaserve::cuda
