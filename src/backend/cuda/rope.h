// Rotary position embedding of Q and K rows, in place.
//
// Pair i (i < rope_dim / 2) of every head rotates by the angle positions[row] * inv_freq[i]:
// the pair is (2i, 2i + 1) in the normal ordering and (i, i + rope_dim / 2) in NeoX. The
// frequencies (with linear / llama3 scaling or a rope_freqs tensor) come from the host
// (cpu::rope_inv_freq), so every backend scales them the same way.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "backend/cuda/attention.h"
#include "backend/cuda/launch.h"
#include "core/status.h"
#include "model/config.h"

namespace llamaserve::cuda {

struct RopeArgs {
  float* q = nullptr;  // row r: n_head heads of head_dim at q + r * q_stride
  int64_t q_stride = 0;
  float* k = nullptr;  // row r: n_head_kv heads at k + r * k_stride
  int64_t k_stride = 0;
  const int32_t* positions = nullptr;  // (n_rows), device
  const float* inv_freq = nullptr;     // (rope_dim / 2), device
  int64_t n_rows = 0;
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  int32_t rope_dim = 0;  // even, <= head_dim
  RopeOrdering ordering = RopeOrdering::kNormal;
};

Status rope(const RopeArgs& args, LaunchStream stream);

// rope() and then write_kv() (attention.h) in one kernel: Q rotated in place, K rotated in
// place and stored with V at the rows' cache slots; the same values as the two launches.
// PRECONDITIONS: those of both; kv.k and kv.k_stride are rope.k and rope.k_stride, kv.n_rows is
// rope.n_rows and kv.kv_dim is n_head_kv * head_dim.
Status rope_write_kv(const RopeArgs& rope, const KvWriteArgs& kv, LaunchStream stream);

}  // namespace llamaserve::cuda
