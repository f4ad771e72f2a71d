// SIMD row dot products of the float weight types (F32, F16, BF16) in the file's row layout:
// sum_i w[i] * x[i] over one weight row and one float activation row. n is the row length in
// elements. Selected through the dispatch table in matmul.cc, never called by name there. The
// quantized types are multiplied packed instead (packed_weight.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace llamaserve::cpu {

using RowDotFn = float (*)(const void* w_row, const void* act_row, int64_t n);

// y[r] = dot(w + r * w_stride, act_row) for r < n_rows: one call per tile of rows, so that
// the row loop is compiled with the dot product inlined.
using RowsDotFn = void (*)(const uint8_t* w, size_t w_stride, int64_t n_rows, const void* act_row,
                           int64_t n, float* y);

template <float (*Dot)(const void*, const void*, int64_t)>
inline void dot_rows(const uint8_t* w, size_t w_stride, int64_t n_rows, const void* act_row,
                     int64_t n, float* y) {
  for (int64_t r = 0; r < n_rows; ++r)
    y[r] = Dot(w + static_cast<size_t>(r) * w_stride, act_row, n);
}

// Four activation rows at once (prompt processing), rows act + t * act_stride for t < 4:
// y[t * y_stride + r] = dot(w row r, activation row t) for r < n_rows. Types without one
// run RowsDotFn per token.
using Rows4DotFn = void (*)(const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                            size_t act_stride, int64_t n, float* y, int64_t y_stride);

// Activation row: floats.
float dot_f32(const void* w_row, const void* act_row, int64_t n);
void dot_rows_f32(const uint8_t* w, size_t w_stride, int64_t n_rows, const void* act_row, int64_t n,
                  float* y);
float dot_f16(const void* w_row, const void* act_row, int64_t n);
void dot_rows_f16(const uint8_t* w, size_t w_stride, int64_t n_rows, const void* act_row, int64_t n,
                  float* y);
float dot_bf16(const void* w_row, const void* act_row, int64_t n);
void dot_rows_bf16(const uint8_t* w, size_t w_stride, int64_t n_rows, const void* act_row,
                   int64_t n, float* y);

}  // namespace llamaserve::cpu
