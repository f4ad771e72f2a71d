// Q8_0, Q4_0 and Q4_1 encoders. These follow ggml's reference rules exactly (the same float
// operations in the same order, built without FMA contraction) so that a tensor quantized
// here is byte-identical to one quantized by llama.cpp or gguf-py.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "quant/quantize_blocks.h"

namespace llamaserve::quant_internal {

void quantize_block_q8_0(const float* x, BlockQ8_0* block) {
  float amax = 0.0f;
  for (int i = 0; i < kQK8_0; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127;
  const float inverse_d = d != 0.0f ? 1.0f / d : 0.0f;
  block->d = float_to_half(d);
  // roundf: ties away from zero, as ggml. |x * inverse_d| <= 127 (+ rounding), so it fits.
  for (int i = 0; i < kQK8_0; ++i)
    block->qs[i] = static_cast<int8_t>(std::roundf(x[i] * inverse_d));
}

void quantize_block_q4_0(const float* x, BlockQ4_0* block) {
  // The element of largest magnitude (the first one on ties) maps to q = 0, i.e. -8 * d,
  // which keeps its sign and uses the asymmetric side of [-8, 7].
  float amax = 0.0f;
  float max = 0.0f;
  for (int i = 0; i < kQK4_0; ++i) {
    if (amax < std::fabs(x[i])) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  const float d = max / -8;
  const float inverse_d = d != 0.0f ? 1.0f / d : 0.0f;
  block->d = float_to_half(d);
  for (int j = 0; j < kQK4_0 / 2; ++j) {
    const float x0 = x[j] * inverse_d;
    const float x1 = x[j + kQK4_0 / 2] * inverse_d;
    // Truncation of (v + 8.5) is rounding to nearest for the non-negative v + 8.
    const int q0 = std::min(15, static_cast<int>(x0 + 8.5f));
    const int q1 = std::min(15, static_cast<int>(x1 + 8.5f));
    block->qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

void quantize_block_q4_1(const float* x, BlockQ4_1* block) {
  float min = x[0];
  float max = x[0];
  for (int i = 1; i < kQK4_1; ++i) {
    min = std::min(min, x[i]);
    max = std::max(max, x[i]);
  }
  const float d = (max - min) / 15;
  const float inverse_d = d != 0.0f ? 1.0f / d : 0.0f;
  block->d = float_to_half(d);
  block->m = float_to_half(min);
  for (int j = 0; j < kQK4_1 / 2; ++j) {
    const float x0 = (x[j] - min) * inverse_d;
    const float x1 = (x[j + kQK4_1 / 2] - min) * inverse_d;
    const int q0 = std::min(15, static_cast<int>(x0 + 0.5f));
    const int q1 = std::min(15, static_cast<int>(x1 + 0.5f));
    block->qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

}  // namespace llamaserve::quant_internal
