// Rotary position embedding: the per-pair frequencies (with scaling) of a model, the
// cos/sin of a batch's positions, and their application to Q and K heads.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace llamaserve::cpu {

// inv_freq[i] for i < rope_dim / 2: theta^(-2i / rope_dim), then scaled:
//   linear: divided by the factor (positions are compressed);
//   llama3: low frequencies divided by the factor, high kept, a smooth blend in between;
//   freq_factors (a GGUF rope_freqs tensor, rope_dim / 2 values): divided elementwise, and
//   then it replaces the metadata scaling, which encodes the same thing.
std::vector<float> rope_inv_freq(const ModelConfig& config, const float* freq_factors);

// cos/sin of position * inv_freq[i] for each position: out[p * n_pairs + i].
void rope_cos_sin(const std::vector<float>& inv_freq, const int32_t* positions, int64_t n_positions,
                  float* cos_out, float* sin_out);

// Rotates the first rope_dim dims of each of n_heads heads in `x` (heads contiguous,
// head_dim apart) by the angles of one position (n_pairs = rope_dim / 2 cos/sin values).
void rope_apply(float* x, int64_t n_heads, int64_t head_dim, int64_t rope_dim,
                RopeOrdering ordering, const float* cos, const float* sin);

}  // namespace llamaserve::cpu
