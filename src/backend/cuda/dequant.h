// Dequantization of weight rows on the device: the embedding lookup (token ids → fp32 rows)
// and the f16/bf16 copies of quantized weights that prefill GEMMs multiply with.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "backend/cuda/device_matrix.h"
#include "backend/cuda/launch.h"
#include "core/status.h"

namespace llamaserve::cuda {

enum class DequantOut { kF32, kF16, kBF16 };

struct DequantArgs {
  DeviceMatrix w;
  // Source rows: row_ids[i] (device array, e.g. token ids; clamped to [0, rows)) when given,
  // else first_row + i.
  const int32_t* row_ids = nullptr;
  int64_t first_row = 0;
  int64_t n_rows = 0;
  DequantOut out_type = DequantOut::kF32;
  void* dst = nullptr;     // row i at dst + i * dst_stride elements; 16-byte aligned
  int64_t dst_stride = 0;  // elements; a multiple of 8 and >= w.cols
};

Status dequantize_rows(const DequantArgs& args, LaunchStream stream);

}  // namespace llamaserve::cuda
