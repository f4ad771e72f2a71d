// The sub-block scales and mins of a Q4_K / Q5_K super-block, unpacked for the K-quant dot
// products of both kernel tables (dot_kquant.cc, dot_kquant_avx512.cc). Scalar code: the
// AVX-512 file compiles it as plain x86-64-v3 code too (simd_avx512.h), so both share it.
#pragma once

#include <cstdint>

#include "backend/cpu/act_quant.h"
#include "quant/blocks.h"

namespace llamaserve::cpu {

struct ScalesMins {
  uint8_t scale[8];
  uint8_t min[8];
};

inline ScalesMins unpack_scales(const uint8_t* packed) {
  ScalesMins out;
  for (int j = 0; j < 8; ++j) q4_k_scale_min(j, packed, &out.scale[j], &out.min[j]);
  return out;
}

// Σ_j min[j] * (Σ of activation sub-block j), sub-block j = groups 2j and 2j + 1.
inline int32_t min_correction(const ScalesMins& sm, const ActBlockQ8_256& x) {
  int32_t sum = 0;
  for (int j = 0; j < 8; ++j) sum += sm.min[j] * (x.group_sums[2 * j] + x.group_sums[2 * j + 1]);
  return sum;
}

}  // namespace llamaserve::cpu
