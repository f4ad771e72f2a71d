// Warm-up: before a model answers /ready, every replica runs the passes its first requests
// will run, so that none of them pays for what happens only once: first-touch page faults of
// the weights and the KV cache, and on a GPU the lazy loading of each kernel, the cuBLAS
// workspace of each GEMM shape and the capture of each decode graph.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "engine/engine_group.h"

namespace llamaserve {

// Requests that run together: `prompt_tokens` gives each one's prompt length.
struct WarmupWave {
  std::vector<int32_t> prompt_tokens;
  int32_t max_new_tokens = 2;
  bool random_sampling = false;  // one request of the wave samples at temperature > 0
};

struct WarmupLimits {
  int32_t tokens = 2;              // generated per request (>= 2 reaches a decode step); 0 = none
  int32_t max_batch_tokens = 512;  // rows of the engine's largest prompt pass
  int32_t max_running = 4;         // sequences of its largest decode step
  int32_t max_waiting = 256;       // requests its queue takes at once
  int32_t max_context = 4096;
  // GPU executors pick kernels and graphs by the pass's shape: every power of two of prompt
  // rows and decode sequences is run once. On the CPU one short generation touches it all.
  bool every_shape = false;
};

// The waves, in order: prompts of 1, 2, 4, ... rows up to max_batch_tokens (one sequence each,
// so the pass has exactly that many rows), then decode steps of 2, 4, ... sequences up to
// max_running (one-token prompts, generating until every sequence of the wave was admitted
// and decodes with the others), the last wave with a randomly sampled request. Without
// every_shape: one short prompt.
std::vector<WarmupWave> warmup_waves(const WarmupLimits& limits);

// Runs the waves on every replica (replicas in parallel, waves in order); the first request
// that does not end normally fails the warm-up.
Status warm_up(EngineGroup& engines, const WarmupLimits& limits);

}  // namespace llamaserve
