// Reference conversions between float rows and the GGUF tensor types this build computes
// with (F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q4_K Q5_K Q6_K), and a reference dot product.
//
// A "row" is n consecutive elements; for block types n must be a multiple of the block size
// and the row's bytes are row_bytes(type, n). These functions are plain and obviously
// correct; optimized kernels live in the backends and are tested against them.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/status.h"
#include "quant/types.h"

namespace llamaserve {

class ThreadPool;

// True for the types dequantize_row / quantize_row / dot_row handle.
bool quant_supported(TensorType type);

// Ok when `type` is supported and a row of n_elems elements is whole blocks; otherwise an
// error naming the type, n_elems and the block size.
Status check_row(TensorType type, int64_t n_elems);

// dst[0..n) = the values of the n elements encoded in src (row_bytes(type, n) bytes).
// Bit-exact with ggml's and gguf-py's dequantizers.
Status dequantize_row(TensorType type, const void* src, float* dst, int64_t n);

// Encodes src[0..n) into row_bytes(type, n) bytes at dst. Q8_0 / Q4_0 / Q4_1 / F16 / BF16 give
// the same bytes as ggml's reference quantizers; the K-quants search per-sub-block scales and
// mins that minimise the squared error.
Status quantize_row(TensorType type, const float* src, void* dst, int64_t n);

// quantize_row over n_rows rows of n_cols floats (row-major), rows spread over `pool`
// (nullptr: the calling thread alone). dst receives n_rows * row_bytes(type, n_cols) bytes.
Status quantize_tensor(TensorType type, const float* src, void* dst, int64_t n_rows, int64_t n_cols,
                       ThreadPool* pool);

// sum_i w[i] * x[i] for one row of weights stored as `wtype`, decoded block by block.
// PRECONDITION: check_row(wtype, n).is_ok() (returns NaN otherwise, so a violation shows).
float dot_row(TensorType wtype, const void* w_row, const float* x, int64_t n);

// "Q4_K" → TensorType::Q4_K (case-insensitive); any supported type's name.
Result<TensorType> parse_tensor_type(std::string_view name);

}  // namespace llamaserve
