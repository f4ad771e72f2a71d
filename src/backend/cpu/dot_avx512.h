// The AVX-512 versions (AVX512F/BW/VL + VNNI) of the float row dot products of dot.h, with the
// same contracts. matmul.cc's AVX-512 kernel table is their only caller, chosen once per backend
// by cpu_isa.h; never call them on a CPU without AVX-512 VNNI.
//
// Results: bit-identical to the AVX2 versions: the float work keeps the AVX2 kernels' lanes,
// operands and order, wider registers holding several tokens' accumulators side by side (the
// four-token kernels). tests/unit/backend/avx512_test.cc checks equality on AVX-512 machines.
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

}  // namespace llamaserve::cpu
