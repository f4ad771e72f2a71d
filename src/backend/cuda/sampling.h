// Token sampling on the device, so that only token ids cross PCIe per step.
//
// Per row: greedy argmax when temperature <= 0; otherwise softmax(logits / temperature)
// restricted to the top_k most likely tokens (top_k <= 0: all) and then to the smallest set
// of most likely tokens whose probability reaches top_p (top_p >= 1: all), renormalized, and
// one draw from a counter-based generator (Philox4x32-10) keyed by `seed` with counter
// `offset`: the same (seed, offset) draws the same token, so a request with a seed is
// reproducible when the engine passes its step number as the offset. Ties at the top-k /
// top-p boundary keep every tied token.
//
// Repetition penalties and min-p are the engine sampler's (host) business; this covers the
// common request shape.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "backend/batch.h"
#include "core/status.h"

namespace llamaserve::cuda {

using SamplingParams = RowSampling;

// tokens[r] = the token drawn from row r of `logits` (row stride logits_stride floats) with
// params[r]. params and tokens are device arrays of n_rows.
Status sample_tokens(const float* logits, int64_t logits_stride, int64_t n_rows, int64_t n_vocab,
                     const SamplingParams* params, int32_t* tokens, cudaStream_t stream);

// Philox4x32-10's first output as a float in [0, 1), exactly as the kernel draws it; for tests.
float philox_uniform(uint64_t seed, uint64_t offset);

}  // namespace llamaserve::cuda
