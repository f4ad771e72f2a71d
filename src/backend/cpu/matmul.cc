#include "backend/cpu/matmul.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <iterator>

#include "backend/cpu/dot_avx512.h"
#include "quant/quant.h"

namespace llamaserve::cpu {
namespace {

constexpr MatmulKernel kAvx2Kernels[] = {
    {TensorType::F32, ActFormat::kF32, 1, dot_f32, dot_rows_f32},
    {TensorType::F16, ActFormat::kF32, 1, dot_f16, dot_rows_f16},
    {TensorType::BF16, ActFormat::kF32, 1, dot_bf16, dot_rows_bf16},
    {TensorType::Q8_0, ActFormat::kQ8_32, 32, nullptr, nullptr, nullptr, packed_tile_q8_0},
    {TensorType::Q4_0, ActFormat::kQ8_32x2, 32, nullptr, nullptr, nullptr, packed_tile_q4_0},
    {TensorType::Q4_1, ActFormat::kQ8_32x2, 32, nullptr, nullptr, nullptr, packed_tile_q4_1},
    {TensorType::Q4_K, ActFormat::kQ8_256, 256, nullptr, nullptr, nullptr, packed_tile_q4_k},
    {TensorType::Q5_K, ActFormat::kQ8_256, 256, nullptr, nullptr, nullptr, packed_tile_q5_k},
    {TensorType::Q6_K, ActFormat::kQ8_256, 256, nullptr, nullptr, nullptr, packed_tile_q6_k},
};

// The float types gain a four-token kernel here (the AVX2 table has none); per token it
// computes what the one-token kernel does.
constexpr MatmulKernel kAvx512Kernels[] = {
    {TensorType::F32, ActFormat::kF32, 1, dot_f32_avx512, dot_rows_f32_avx512,
     dot_rows4_f32_avx512},
    {TensorType::F16, ActFormat::kF32, 1, dot_f16_avx512, dot_rows_f16_avx512,
     dot_rows4_f16_avx512},
    {TensorType::BF16, ActFormat::kF32, 1, dot_bf16_avx512, dot_rows_bf16_avx512,
     dot_rows4_bf16_avx512},
    {TensorType::Q8_0, ActFormat::kQ8_32, 32, nullptr, nullptr, nullptr, packed_tile_q8_0_avx512,
     packed_tile_pair_q8_0_avx512},
    {TensorType::Q4_0, ActFormat::kQ8_32x2, 32, nullptr, nullptr, nullptr, packed_tile_q4_0_avx512,
     packed_tile_pair_q4_0_avx512},
    {TensorType::Q4_1, ActFormat::kQ8_32x2, 32, nullptr, nullptr, nullptr, packed_tile_q4_1_avx512,
     packed_tile_pair_q4_1_avx512},
    {TensorType::Q4_K, ActFormat::kQ8_256, 256, nullptr, nullptr, nullptr, packed_tile_q4_k_avx512},
    {TensorType::Q5_K, ActFormat::kQ8_256, 256, nullptr, nullptr, nullptr, packed_tile_q5_k_avx512},
    {TensorType::Q6_K, ActFormat::kQ8_256, 256, nullptr, nullptr, nullptr, packed_tile_q6_k_avx512},
};

// The AVX-512 table with the AMX kernels of the types that have them.
std::span<const MatmulKernel> amx_kernels() {
  static const auto table = [] {
    std::array<MatmulKernel, std::size(kAvx512Kernels)> t;
    std::copy(std::begin(kAvx512Kernels), std::end(kAvx512Kernels), t.begin());
    for (MatmulKernel& k : t) {
      if (k.type == TensorType::Q8_0) k.packed_tile_pair_amx = packed_tile_pair_q8_0_amx;
      if (k.type == TensorType::Q4_0) k.packed_tile_pair_amx = packed_tile_pair_q4_0_amx;
      if (k.type == TensorType::Q4_1) k.packed_tile_pair_amx = packed_tile_pair_q4_1_amx;
      if (k.type == TensorType::Q4_K) k.packed_tile_pair_amx = packed_tile_pair_q4_k_amx;
      if (k.type == TensorType::Q5_K) k.packed_tile_pair_amx = packed_tile_pair_q5_k_amx;
      if (k.type == TensorType::Q6_K) k.packed_tile_pair_amx = packed_tile_pair_q6_k_amx;
      // The K-quants' AMX kernels read the rows their other kernels read.
      if (k.packed_tile_pair_amx != nullptr && k.act_format == ActFormat::kQ8_256) {
        k.amx_act_format = ActFormat::kQ8_256;
      }
    }
    return t;
  }();
  return table;
}

// One ActCache serves both tables, check_matmul_supported does not ask which one runs, and
// a PackedWeight serves both. (That a type has either row kernels or a packed-tile kernel is
// tested: function addresses are no constant expressions in every build.)
constexpr bool same_types_and_formats() {
  if (std::size(kAvx2Kernels) != std::size(kAvx512Kernels)) return false;
  for (size_t i = 0; i < std::size(kAvx2Kernels); ++i) {
    const MatmulKernel& a = kAvx2Kernels[i];
    const MatmulKernel& b = kAvx512Kernels[i];
    if (a.type != b.type || a.act_format != b.act_format || a.block_elems != b.block_elems) {
      return false;
    }
  }
  return true;
}
static_assert(same_types_and_formats());

// Rows handled per pass over the tokens: small enough that the tile's weight bytes stay in
// L1 while each activation row is read once per tile; a packed tile's rows.
constexpr int64_t kRowTile = kPackedRows;
// The threads take the tiles of each output two at a time (a unit), so that a pair of whole tiles
// always meets in one pass of the kernels that take two (packed_tile_pair, the AMX ones).
constexpr int64_t kUnitTiles = 2;

}  // namespace

const MatmulKernel* find_matmul_kernel(TensorType type, KernelIsa isa) {
  const std::span<const MatmulKernel> table = isa == KernelIsa::kAvx512Amx ? amx_kernels()
                                              : isa == KernelIsa::kAvx512Vnni
                                                  ? std::span<const MatmulKernel>(kAvx512Kernels)
                                                  : std::span<const MatmulKernel>(kAvx2Kernels);
  for (const MatmulKernel& kernel : table) {
    if (kernel.type == type) return &kernel;
  }
  return nullptr;
}

Status check_matmul_supported(const QTensor& tensor) {
  const MatmulKernel* kernel = find_matmul_kernel(tensor.type, KernelIsa::kAvx2);
  if (kernel == nullptr) {
    return make_error(StatusCode::kUnsupported,
                      "tensor '{}' has type {}, which the CPU backend has no matmul kernel for "
                      "(supported: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q4_K Q5_K Q6_K)",
                      tensor.name, type_name(tensor.type));
  }
  if (tensor.cols() % kernel->block_elems != 0) {
    return make_error(StatusCode::kInvalidArgument,
                      "tensor '{}': {} columns are not a multiple of {}", tensor.name,
                      tensor.cols(), kernel->block_elems);
  }
  return Status::ok();
}

ActCache::ActCache(int64_t max_tokens, int64_t max_cols)
    : max_tokens_(max_tokens), max_cols_(max_cols) {
  // Room for the row rounded up to whole blocks of every format.
  const int64_t padded_cols = (max_cols + 255) / 256 * 256;
  for (ActFormat format :
       {ActFormat::kQ8_32, ActFormat::kQ8_32x2, ActFormat::kQ8_256, ActFormat::kQ8_32Planar}) {
    buffers_[static_cast<int>(format)].resize(static_cast<size_t>(max_tokens) *
                                              act_row_bytes(format, padded_cols));
  }
}

void ActCache::reset(const float* x, int64_t n_tokens, int64_t cols) {
  assert(n_tokens <= max_tokens_ && cols <= max_cols_);
  x_ = x;
  n_tokens_ = n_tokens;
  cols_ = cols;
  std::fill(std::begin(have_), std::end(have_), false);
}

const uint8_t* ActCache::rows(ActFormat format, ThreadPool& pool) {
  if (format == ActFormat::kF32) return reinterpret_cast<const uint8_t*>(x_);
  const int index = static_cast<int>(format);
  uint8_t* out = buffers_[index].data();
  if (!have_[index]) {
    const size_t stride = act_row_bytes(format, cols_);
    pool.parallel_for(static_cast<size_t>(n_tokens_), 4, [&](size_t begin, size_t end) {
      for (size_t t = begin; t < end; ++t) {
        quantize_act_row(format, x_ + t * static_cast<size_t>(cols_), out + t * stride, cols_);
      }
    });
    have_[index] = true;
  }
  return out;
}

void matmul(std::span<const MatmulOutput> outputs, ActCache& act, ThreadPool& pool, KernelIsa isa) {
  struct Prepared {
    const MatmulKernel* kernel;
    const uint8_t* act_rows;  // in kernel->act_format, where a kernel but the AMX one reads them
    size_t act_stride;
    const uint8_t* weights;
    size_t weight_stride;
    int64_t n_tiles;
    int64_t first_unit;  // in the concatenated unit space
    int64_t n_units;
    // The rows packed_tile_pair_amx reads, where it runs: at least kAmxTokens tokens.
    const uint8_t* amx_act_rows;
    size_t amx_act_stride;
  };
  // A handful of outputs share one input (Q/K/V, gate/up).
  constexpr size_t kMaxOutputs = 8;
  assert(outputs.size() <= kMaxOutputs);
  Prepared prepared[kMaxOutputs];
  const size_t n_outputs = std::min(outputs.size(), kMaxOutputs);
  int64_t total_units = 0;
  bool any_amx = false;  // some output runs the AMX kernels (release_amx_tiles at the end)
  const int64_t n_tokens = act.n_tokens();
  const int64_t cols = act.cols();
  for (size_t i = 0; i < n_outputs; ++i) {
    const MatmulOutput& out = outputs[i];
    const MatmulKernel* kernel = find_matmul_kernel(out.weight->type, isa);
    const QTensor& w = *out.weight;
    assert((out.packed != nullptr) == (kernel->packed_tile != nullptr));
    const int64_t n_tiles = (w.rows() + kRowTile - 1) / kRowTile;
    const int64_t n_units = (n_tiles + kUnitTiles - 1) / kUnitTiles;
    Prepared& p = prepared[i];
    p = {kernel,
         nullptr,
         act_row_bytes(kernel->act_format, cols),
         static_cast<const uint8_t*>(w.data),
         w.bytes_per_row(),
         n_tiles,
         total_units,
         n_units,
         nullptr,
         0};
    const bool amx = kernel->packed_tile_pair_amx != nullptr && n_tokens >= kAmxTokens;
    any_amx |= amx;
    if (amx) {
      p.amx_act_rows = act.rows(kernel->amx_act_format, pool);
      p.amx_act_stride = act_row_bytes(kernel->amx_act_format, cols);
    }
    // Every unit of an AMX output is a pair taking its tokens sixteen at a time, unless tokens or
    // rows are left over or the bias keeps the tiles apart.
    if (!amx || n_tokens % kAmxTokens != 0 || w.rows() % (kUnitTiles * kRowTile) != 0 ||
        out.bias != nullptr) {
      p.act_rows = act.rows(kernel->act_format, pool);
    }
    total_units += n_units;
  }
  // Tile `tile` of output o alone.
  auto run_tile = [&](const MatmulOutput& out, const Prepared& p, int64_t tile) {
    const int64_t local0 = tile * kRowTile;
    const int64_t n_rows = std::min(kRowTile, out.weight->rows() - local0);
    float* y = out.y + local0;
    if (out.packed != nullptr) {
      p.kernel->packed_tile(out.packed->tile(tile), out.packed->n_blocks(), p.act_rows,
                            p.act_stride, n_tokens, y, out.y_stride, n_rows);
    } else {
      const uint8_t* w = p.weights + static_cast<size_t>(local0) * p.weight_stride;
      int64_t t = 0;
      if (p.kernel->dot_rows4 != nullptr) {
        for (; t + 4 <= n_tokens; t += 4) {
          p.kernel->dot_rows4(w, p.weight_stride, n_rows,
                              p.act_rows + static_cast<size_t>(t) * p.act_stride, p.act_stride,
                              cols, y + t * out.y_stride, out.y_stride);
        }
      }
      for (; t < n_tokens; ++t) {
        p.kernel->dot_rows(w, p.weight_stride, n_rows,
                           p.act_rows + static_cast<size_t>(t) * p.act_stride, cols,
                           y + t * out.y_stride);
      }
    }
    if (out.bias) {
      for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t r = 0; r < n_rows; ++r) y[t * out.y_stride + r] += out.bias[local0 + r];
      }
    }
  };
  // Tiles `tile` and `tile` + 1 of output o, both whole, in one pass.
  auto run_pair = [&](const MatmulOutput& out, const Prepared& p, int64_t tile) {
    const uint8_t* tile_a = out.packed->tile(tile);
    const uint8_t* tile_b = out.packed->tile(tile + 1);
    const int64_t n_blocks = out.packed->n_blocks();
    float* y = out.y + tile * kRowTile;
    int64_t t = 0;
    if (p.amx_act_rows != nullptr) {
      t = n_tokens / kAmxTokens * kAmxTokens;
      p.kernel->packed_tile_pair_amx(tile_a, tile_b, n_blocks, p.amx_act_rows, p.amx_act_stride, t,
                                     y, out.y_stride);
    }
    if (t == n_tokens) return;
    const uint8_t* rows = p.act_rows + t * p.act_stride;
    float* rest = y + t * out.y_stride;
    if (p.kernel->packed_tile_pair != nullptr) {
      p.kernel->packed_tile_pair(tile_a, tile_b, n_blocks, rows, p.act_stride, n_tokens - t, rest,
                                 out.y_stride);
    } else {
      p.kernel->packed_tile(tile_a, n_blocks, rows, p.act_stride, n_tokens - t, rest, out.y_stride,
                            kRowTile);
      p.kernel->packed_tile(tile_b, n_blocks, rows, p.act_stride, n_tokens - t, rest + kRowTile,
                            out.y_stride, kRowTile);
    }
  };
  pool.parallel_for(static_cast<size_t>(total_units), 1, [&](size_t begin, size_t end) {
    size_t o = 0;
    for (auto unit = static_cast<int64_t>(begin); unit < static_cast<int64_t>(end); ++unit) {
      while (unit >= prepared[o].first_unit + prepared[o].n_units) ++o;
      const MatmulOutput& out = outputs[o];
      const Prepared& p = prepared[o];
      const int64_t first = (unit - p.first_unit) * kUnitTiles;
      const int64_t tiles = std::min(kUnitTiles, p.n_tiles - first);
      // Two whole tiles: one pass where the table has one.
      if (tiles == 2 && out.packed != nullptr &&
          (p.kernel->packed_tile_pair != nullptr || p.amx_act_rows != nullptr) &&
          out.bias == nullptr && (first + 2) * kRowTile <= out.weight->rows()) {
        run_pair(out, p, first);
      } else {
        for (int64_t k = 0; k < tiles; ++k) run_tile(out, p, first + k);
      }
    }
    // (Where this thread ran none, nothing is configured and the release does nothing.)
    if (any_amx) release_amx_tiles();
  });
}

void matmul_ref(const MatmulOutput& output, const float* x, int64_t n_tokens, ThreadPool* pool) {
  const QTensor& w = *output.weight;
  auto rows = [&](size_t begin, size_t end) {
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (size_t r = begin; r < end; ++r) {
        const float bias = output.bias ? output.bias[r] : 0.0f;
        output.y[t * output.y_stride + static_cast<int64_t>(r)] =
            dot_row(w.type, w.row(static_cast<int64_t>(r)), x + t * w.cols(), w.cols()) + bias;
      }
    }
  };
  if (pool) {
    pool->parallel_for(static_cast<size_t>(w.rows()), 16, rows);
  } else {
    rows(0, static_cast<size_t>(w.rows()));
  }
}

}  // namespace llamaserve::cpu
