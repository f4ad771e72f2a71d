// Reference kernels: plain loops and float math, written to be obviously correct. The
// optimized kernels (ops.h, matmul.h, attention.h) are tested against these, and the
// backend can run a whole forward pass on them (CpuBackendOptions::reference_kernels).
// matmul_ref and attention_ref live next to their optimized versions; rope.h is shared.
#pragma once

#include <cstdint>

namespace llamaserve::cpu::ref {

// y = x / sqrt(mean(x²) + eps) * weight
void rmsnorm(const float* x, const float* weight, float* y, int64_t n, float eps);

// out = gate / (1 + e^-gate) * up
void silu_mul(const float* gate, const float* up, float* out, int64_t n);

// x = e^(x - max x) / Σ e^(x - max x), in place.
void softmax(float* x, int64_t n);

}  // namespace llamaserve::cpu::ref
