#include "backend/cpu/rope.h"

#include <cmath>

namespace llamaserve::cpu {

std::vector<float> rope_inv_freq(const ModelConfig& config, const float* freq_factors) {
  const int64_t n_pairs = config.rope_dim / 2;
  std::vector<float> inv_freq(static_cast<size_t>(n_pairs));
  for (int64_t i = 0; i < n_pairs; ++i) {
    const double exponent = static_cast<double>(2 * i) / static_cast<double>(config.rope_dim);
    inv_freq[i] =
        static_cast<float>(1.0 / std::pow(static_cast<double>(config.rope_theta), exponent));
  }
  if (freq_factors != nullptr) {
    for (int64_t i = 0; i < n_pairs; ++i) inv_freq[i] /= freq_factors[i];
    return inv_freq;
  }
  const RopeScaling& s = config.rope_scaling;
  switch (s.type) {
    case RopeScalingType::kNone: break;
    case RopeScalingType::kLinear:
      for (float& f : inv_freq) f /= s.factor;
      break;
    case RopeScalingType::kLlama3: {
      const double old_ctx = static_cast<double>(s.original_context_length);
      const double low_freq_wavelen = old_ctx / s.low_freq_factor;
      const double high_freq_wavelen = old_ctx / s.high_freq_factor;
      for (float& f : inv_freq) {
        const double wavelen = 2.0 * M_PI / f;
        if (wavelen < high_freq_wavelen) continue;
        if (wavelen > low_freq_wavelen) {
          f = static_cast<float>(f / s.factor);
          continue;
        }
        const double smooth =
            (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = static_cast<float>((1.0 - smooth) * f / s.factor + smooth * f);
      }
      break;
    }
  }
  return inv_freq;
}

void rope_cos_sin(const std::vector<float>& inv_freq, const int32_t* positions, int64_t n_positions,
                  float* cos_out, float* sin_out) {
  const size_t n_pairs = inv_freq.size();
  for (int64_t p = 0; p < n_positions; ++p) {
    // float angle as torch computes it (position * inv_freq in float32), trig in double.
    for (size_t i = 0; i < n_pairs; ++i) {
      const float angle = static_cast<float>(positions[p]) * inv_freq[i];
      cos_out[p * n_pairs + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      sin_out[p * n_pairs + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
}

void rope_apply(float* x, int64_t n_heads, int64_t head_dim, int64_t rope_dim,
                RopeOrdering ordering, const float* cos, const float* sin) {
  const int64_t n_pairs = rope_dim / 2;
  // Partner of pair i: (2i, 2i+1) in the normal ordering, (i, i + n_pairs) in NeoX.
  const int64_t first_step = ordering == RopeOrdering::kNormal ? 2 : 1;
  const int64_t partner_offset = ordering == RopeOrdering::kNormal ? 1 : n_pairs;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* head = x + h * head_dim;
    for (int64_t i = 0; i < n_pairs; ++i) {
      float* a = head + i * first_step;
      float* b = a + partner_offset;
      const float x0 = *a, x1 = *b;
      *a = x0 * cos[i] - x1 * sin[i];
      *b = x0 * sin[i] + x1 * cos[i];
    }
  }
}

}  // namespace llamaserve::cpu
