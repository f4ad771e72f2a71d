// The AVX-512 versions (AVX512F/BW/VL + VNNI) of the row dot products of dot.h, with the same
// contracts and activation formats. matmul.cc's AVX-512 kernel table is their only caller,
// chosen once per backend by cpu_isa.h; never call them on a CPU without AVX-512 VNNI.
//
// Results: bit-identical to the AVX2 versions. The integer products are exact on both paths
// and their int32 lane sums are the same (vpdpbusd sums the same four bytes per lane that
// maddubs + madd do); the float work (block scales, FMAs into the accumulators, the final
// reductions) keeps the AVX2 kernels' lanes, operands and order, wider registers holding
// either several tokens' accumulators side by side (the four-token kernels) or lanes whose
// integer sums are folded back to the AVX2 lanes before any rounding (the K-quants).
// tests/unit/backend/avx512_test.cc checks equality on AVX-512 machines.
#pragma once

#include <cstddef>
#include <cstdint>

namespace llamaserve::cpu {

// Activation row: floats. The four-token versions read each weight row once for four tokens
// (the AVX2 path has none for float weights); per token they compute what the one-token
// version does.
float dot_f32_avx512(const void* w_row, const void* act_row, int64_t n);
float dot_f16_avx512(const void* w_row, const void* act_row, int64_t n);
float dot_bf16_avx512(const void* w_row, const void* act_row, int64_t n);
void dot_rows_f32_avx512(const uint8_t* w, size_t w_stride, int64_t n_rows, const void* act_row,
                         int64_t n, float* y);
void dot_rows_f16_avx512(const uint8_t* w, size_t w_stride, int64_t n_rows, const void* act_row,
                         int64_t n, float* y);
void dot_rows_bf16_avx512(const uint8_t* w, size_t w_stride, int64_t n_rows, const void* act_row,
                          int64_t n, float* y);
void dot_rows4_f32_avx512(const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                          size_t act_stride, int64_t n, float* y, int64_t y_stride);
void dot_rows4_f16_avx512(const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                          size_t act_stride, int64_t n, float* y, int64_t y_stride);
void dot_rows4_bf16_avx512(const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                           size_t act_stride, int64_t n, float* y, int64_t y_stride);

// Activation row: ActBlockQ8_256. PRECONDITION: n % 256 == 0.
float dot_q5_k_avx512(const void* w_row, const void* act_row, int64_t n);
void dot_rows_q5_k_avx512(const uint8_t* w, size_t w_stride, int64_t n_rows, const void* act_row,
                          int64_t n, float* y);
void dot_rows4_q5_k_avx512(const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                           size_t act_stride, int64_t n, float* y, int64_t y_stride);

}  // namespace llamaserve::cpu
