// Activation rows as 8-bit blocks, the input of the integer-dot matvec of quantized weights.
//
// A row of n floats (n a multiple of 32) becomes n int8 codes q and, per block of 32 elements,
// one float4 {d, d·Σq, d·Σq[0..16), d·Σq[16..32)} with x[i] ≈ d·q[i] and d = max|x| / 127.
// The sums let a weight format with an offset (Q4_0's -8, Q4_1's and the K-quants' mins,
// Q6_K's -32 per 16 elements) apply it once per block instead of once per element.
//
// The codes are in pair order (pair_order.h): code i of a block at byte pair_order_byte(i).
//
// Rounding: q = round-to-nearest-even(x · (1 / d)), every step in IEEE fp32, so that
// quantize_q8_reference on the host produces the same bytes as the device kernels (the kernel
// tests rely on it). The fused producers (rmsnorm, silu_mul) use the same arithmetic.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "backend/cuda/launch.h"
#include "backend/cuda/pair_order.h"
#include "core/status.h"

namespace llamaserve::cuda {

inline constexpr int kQ8Block = 32;

struct Q8Rows {
  int8_t* qs = nullptr;   // row r at qs + r * qs_stride; 16-byte aligned
  float4* ds = nullptr;   // row r at ds + r * ds_stride: one float4 per block
  int64_t qs_stride = 0;  // bytes, a multiple of 16
  int64_t ds_stride = 0;  // float4 elements
};

// Bytes of codes and of block scales for n_rows rows of n_cols (each rounded up to 256 bytes).
uint64_t q8_rows_bytes(int64_t n_rows, int64_t n_cols);

// A Q8Rows over `storage` (q8_rows_bytes(n_rows, n_cols) bytes, 256-byte aligned).
Q8Rows q8_rows_view(void* storage, int64_t n_rows, int64_t n_cols);

// out = the 8-bit blocks of x's n_rows rows of n floats.
// PRECONDITIONS: n % 32 == 0; out sized for n_rows rows of n.
Status quantize_q8(const float* x, int64_t x_stride, int64_t n_rows, int64_t n, const Q8Rows& out,
                   LaunchStream stream);

// The same on the host, for one row (the tests' reference). PRECONDITION: n % 32 == 0.
void quantize_q8_reference(const float* x, int64_t n, int8_t* qs, float4* ds);

}  // namespace llamaserve::cuda
