// Re-encodes the tensors of a GGUF model with a file type's mix (file_types.h): each tensor
// is decoded to float rows (any type dequantize_row reads) and encoded again, rows spread
// over a thread pool. Metadata is copied with general.file_type replaced.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/progress.h"
#include "core/status.h"
#include "quant/types.h"

namespace llamaserve {

struct QuantizeOptions {
  std::string type;  // a file type name: q8_0 q4_0 q4_1 q4_k_m q5_k_m q6_k (or f16, ...)
  int threads = 0;   // 0: all cores
  ProgressStyle progress = ProgressStyle::kAuto;
};

struct QuantizeSummary {
  size_t n_tensors = 0;
  uint64_t input_bytes = 0;                      // tensor data of the input
  uint64_t output_bytes = 0;                     // tensor data written
  std::map<TensorType, size_t> tensors_by_type;  // of the output
  std::vector<std::string> notes;  // block-size fallbacks, requantization of quantized input
};

// Writes `output_path` (temp file + rename: nothing is left there on failure). Tensors whose
// type does not change are copied byte for byte.
Result<QuantizeSummary> quantize_model(const std::string& input_path,
                                       const std::string& output_path,
                                       const QuantizeOptions& options);

}  // namespace llamaserve
