// SIMD row dot products, one per weight type: sum_i w[i] * x[i] over one weight row and one
// activation row in the representation the type consumes (act_quant.h). n is the row length
// in elements. Selected through the dispatch table in matmul.cc, never called by name there.
#pragma once

#include <cstdint>

namespace llamaserve::cpu {

using RowDotFn = float (*)(const void* w_row, const void* act_row, int64_t n);

// Activation row: floats.
float dot_f32(const void* w_row, const void* act_row, int64_t n);
float dot_f16(const void* w_row, const void* act_row, int64_t n);
float dot_bf16(const void* w_row, const void* act_row, int64_t n);

// Activation row: ActBlockQ8_32. PRECONDITION: n % 32 == 0.
float dot_q8_0(const void* w_row, const void* act_row, int64_t n);
float dot_q4_0(const void* w_row, const void* act_row, int64_t n);
float dot_q4_1(const void* w_row, const void* act_row, int64_t n);

// Activation row: ActBlockQ8_256. PRECONDITION: n % 256 == 0.
float dot_q4_k(const void* w_row, const void* act_row, int64_t n);
float dot_q5_k(const void* w_row, const void* act_row, int64_t n);
float dot_q6_k(const void* w_row, const void* act_row, int64_t n);

}  // namespace llamaserve::cpu
