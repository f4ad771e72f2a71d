// Matrix products of weights (any supported TensorType) with activation rows: the hot path
// of the CPU backend. Y[t, r] = Σ_c W[r, c] · X[t, c] (+ bias[r]).
//
// The activation rows are converted once per input into the form the weight type's kernel
// consumes (ActCache: floats, or 8-bit blocks for the integer dot products of the quantized
// types), then the output rows go in tiles of eight over the thread pool: one packed-tile
// kernel for the eight rows of a quantized weight (its PackedWeight; the AVX-512 table takes
// two whole Q4_0/Q4_1/Q8_0 tiles at once, one in each half of a register), one row-dot per row and
// token for the float types. Several matrices that read the same input (Q/K/V, gate/up) run in
// one parallel region over their concatenated rows.
//
// Two kernel tables, AVX2 and AVX-512 (cpu_isa.h): the caller passes the KernelIsa its
// backend resolved once; both tables have the same types, activation formats and results. With
// AMX (KernelIsa::kAvx512Amx) the AVX-512 table's quantized entries also have
// packed_tile_pair_amx, which takes a pair of tiles' tokens sixteen at a time on the tile
// unit, with the same results; the tokens past the last sixteen go through packed_tile_pair (or
// packed_tile, tile by tile, for the types without it).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/dot.h"
#include "backend/cpu/packed_weight.h"
#include "core/aligned_vector.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "model/weights.h"

namespace llamaserve::cpu {

// The dispatch table entry of one weight type. The float types, read in the file's row layout,
// have dot and dot_rows (and maybe dot_rows4); the types PackedWeight::packs have packed_tile
// only.
struct MatmulKernel {
  TensorType type;
  ActFormat act_format;
  int64_t block_elems;  // the activation row length must be a multiple of this
  RowDotFn dot;
  RowsDotFn dot_rows;
  Rows4DotFn dot_rows4 = nullptr;  // optional: four tokens per weight pass
  PackedTileFn packed_tile = nullptr;
  PackedTilePairFn packed_tile_pair = nullptr;  // optional: two whole tiles at once
  // Optional, AMX only: a pair of whole tiles for kAmxTokens tokens at a time, its activation
  // rows in amx_act_format.
  PackedTilePairFn packed_tile_pair_amx = nullptr;
  ActFormat amx_act_format = ActFormat::kQ8_32Planar;
};

// The kernel of `type` in the table of `isa`, or nullptr when the CPU backend cannot multiply
// with it. The AVX-512 table's functions may only be called where cpu_has_avx512_vnni(), and
// packed_tile_pair_amx (set in kAvx512Amx's table only) where cpu_has_amx_int8().
const MatmulKernel* find_matmul_kernel(TensorType type, KernelIsa isa);

// Ok when `tensor` can be multiplied on the CPU; otherwise an error naming it and its type.
Status check_matmul_supported(const QTensor& tensor);

// The activation rows of one matmul input in every representation asked for so far.
// Buffers are sized once for max_tokens × max_cols and reused.
class ActCache {
 public:
  ActCache(int64_t max_tokens, int64_t max_cols);

  // PRECONDITION: n_tokens <= max_tokens, cols <= max_cols; x stays valid until the next reset.
  void reset(const float* x, int64_t n_tokens, int64_t cols);

  // Rows in `format` (row i at i * act_row_bytes(format, cols())), converted on first use; the
  // first row 64-byte aligned.
  const uint8_t* rows(ActFormat format, ThreadPool& pool);

  int64_t n_tokens() const { return n_tokens_; }
  int64_t cols() const { return cols_; }

 private:
  const float* x_ = nullptr;
  int64_t n_tokens_ = 0;
  int64_t cols_ = 0;
  int64_t max_tokens_;
  int64_t max_cols_;
  static constexpr int kFormats = 5;  // ActFormat values
  bool have_[kFormats] = {};
  CacheAlignedVector<uint8_t> buffers_[kFormats];
};

struct MatmulOutput {
  const QTensor* weight;  // (rows, cols)
  float* y;               // y[t * y_stride + r]
  int64_t y_stride;
  const float* bias = nullptr;  // (rows) or nullptr
  // The weight's rows interleaved, read instead of weight->data: required for the types
  // PackedWeight::packs, and only for them.
  const PackedWeight* packed = nullptr;
};

// Computes every output over the input held by `act` with the kernels of `isa`.
// PRECONDITIONS: each weight's cols == act.cols(); each weight passed check_matmul_supported;
// each output of a type PackedWeight::packs has its `packed`; isa is kAvx2, or kAvx512Vnni where
// cpu_has_avx512_vnni(), or kAvx512Amx where cpu_has_amx_int8().
void matmul(std::span<const MatmulOutput> outputs, ActCache& act, ThreadPool& pool, KernelIsa isa);

// Plain reference: each output element through quant's dot_row on float activations.
void matmul_ref(const MatmulOutput& output, const float* x, int64_t n_tokens, ThreadPool* pool);

}  // namespace llamaserve::cpu
