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
// common request shape. Structured output's token masks (RowSampling::allowed) are applied to
// the logits on the device first (mask_logits), so that constrained rows sample here too.
#pragma once

#include <cstdint>
#include <span>

#include <cuda_runtime_api.h>

#include "backend/batch.h"
#include "core/status.h"

namespace llamaserve::cuda {

using SamplingParams = RowSampling;

// tokens[r] = the token drawn from row r of `logits` (row stride logits_stride floats) with
// params[r]. params and tokens are device arrays of n_rows.
Status sample_tokens(const float* logits, int64_t logits_stride, int64_t n_rows, int64_t n_vocab,
                     const SamplingParams* params, int32_t* tokens, cudaStream_t stream);

// Sets logits[r][i] to -infinity for every token i that row r's mask does not allow:
// masks[r * words_per_row + i / 64] bit i % 64 (device memory, n_rows x words_per_row).
// PRECONDITIONS: words_per_row * 64 >= n_vocab.
Status mask_logits(float* logits, int64_t logits_stride, int64_t n_rows, int64_t n_vocab,
                   const uint64_t* masks, int64_t words_per_row, cudaStream_t stream);

// The masks of a pass's rows (RowSampling::allowed, host memory) packed into one pinned buffer
// and copied to the device as mask_logits reads them; rows without a mask allow every token.
// Grows on demand. Not thread-safe; the host buffer is reused once `stream` has passed the copy.
class MaskStaging {
 public:
  MaskStaging() = default;
  MaskStaging(const MaskStaging&) = delete;
  MaskStaging& operator=(const MaskStaging&) = delete;
  ~MaskStaging();

  // The device masks of `rows` (ceil(n_vocab / 64) words each), queued on `stream`; null when
  // no row has a mask.
  Result<const uint64_t*> stage(std::span<const RowSampling> rows, int64_t n_vocab,
                                cudaStream_t stream);

 private:
  uint64_t* host_ = nullptr;  // pinned
  uint64_t* device_ = nullptr;
  size_t capacity_words_ = 0;
};

// Philox4x32-10's first output as a float in [0, 1), exactly as the kernel draws it; for tests.
float philox_uniform(uint64_t seed, uint64_t offset);

}  // namespace llamaserve::cuda
