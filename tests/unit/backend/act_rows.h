// The floats an activation row stands for, for the CPU kernel tests (kernels_test.cc,
// avx512_test.cc): what the integer kernels multiply with.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cpu/act_quant.h"

namespace llamaserve::cpu {

// Row `row` in `format`, n elements, as floats (an F32 row copied as it is).
inline std::vector<float> dequantize_act(ActFormat format, const uint8_t* row, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  if (format == ActFormat::kQ8_32) {
    const auto* blocks = reinterpret_cast<const ActBlockQ8_32*>(row);
    for (int64_t i = 0; i < n; ++i) out[i] = blocks[i / 32].d * blocks[i / 32].qs[i % 32];
  } else if (format == ActFormat::kQ8_32x2) {
    const auto* pairs = reinterpret_cast<const ActBlockQ8_32x2*>(row);
    for (int64_t i = 0; i < n; ++i) {
      const ActBlockQ8_32x2& p = pairs[i / 64];
      const int64_t half = (i % 64) / 32, j = i % 32;
      const int8_t q = j < 16 ? p.low[16 * half + j] : p.high[16 * half + j - 16];
      out[i] = p.scale_sum[2 * half] * q;
    }
  } else if (format == ActFormat::kQ8_32Planar) {
    const float* d = planar_scales(row, n / 32);
    for (int64_t i = 0; i < n; ++i) out[i] = d[i / 32] * planar_codes(row, i / 32)[i % 32];
  } else if (format == ActFormat::kQ8_256) {
    const auto* blocks = reinterpret_cast<const ActBlockQ8_256*>(row);
    for (int64_t i = 0; i < n; ++i) out[i] = blocks[i / 256].d * blocks[i / 256].qs[i % 256];
  } else {
    std::memcpy(out.data(), row, static_cast<size_t>(n) * sizeof(float));
  }
  return out;
}

}  // namespace llamaserve::cpu
