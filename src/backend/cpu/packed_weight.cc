#include "backend/cpu/packed_weight.h"

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <cstring>
#include <type_traits>

namespace llamaserve::cpu {
namespace {

constexpr size_t kAlign = 64;

// Block b of the tile's rows r0.. (rows past `rows` stay zero: scale 0, quants 0).
template <typename Src, typename Dst>
void pack_block(const QTensor& w, int64_t r0, int64_t b, Dst& out) {
  for (int64_t r = 0; r < kPackedRows && r0 + r < w.rows(); ++r) {
    const Src& src = reinterpret_cast<const Src*>(w.row(r0 + r))[b];
    out.d[r] = src.d;
    if constexpr (requires { src.m; }) out.m[r] = src.m;
    constexpr int kGroups = sizeof(src.qs) / 4;  // 4 (Q4: 16 bytes a row) or 8 (Q8_0)
    for (int g = 0; g < kGroups; ++g) std::memcpy(out.qs + 32 * g + 4 * r, src.qs + 4 * g, 4);
  }
}

// Q4_K and Q5_K: the 6-bit scales and mins unpacked into their per-row places; Q5_K's fifth
// bits regrouped by packed group.
template <typename Src, typename Dst>
void pack_k_block(const QTensor& w, int64_t r0, int64_t b, Dst& out) {
  for (int64_t r = 0; r < kPackedRows && r0 + r < w.rows(); ++r) {
    const Src& src = reinterpret_cast<const Src*>(w.row(r0 + r))[b];
    out.d[r] = src.d;
    out.dmin[r] = src.dmin;
    for (int j = 0; j < 8; ++j) {
      uint8_t scale, min;
      q4_k_scale_min(j, src.scales, &scale, &min);
      out.scales[j][r] = scale;
      out.mins[j / 2][2 * r + j % 2] = min;
    }
    for (int g = 0; g < 32; ++g) std::memcpy(out.qs + 32 * g + 4 * r, src.qs + 4 * g, 4);
    if constexpr (std::is_same_v<Src, BlockQ5_K>) {
      for (int g = 0; g < 32; ++g) {
        const int k = g / 8;  // chunk: sub-blocks 2k (low nibbles) and 2k + 1 (high)
        for (int c = 0; c < 4; ++c) {
          const int l = 4 * (g % 8) + c;  // the byte of the chunk
          const int low = (src.qh[l] >> (2 * k)) & 1, high = (src.qh[l] >> (2 * k + 1)) & 1;
          out.qh[g / 4][4 * r + c] |= static_cast<uint8_t>((low | (high << 1)) << (2 * (g % 4)));
        }
      }
    }
  }
}

template <>
void pack_block<BlockQ4_K, PackedQ4_KBlock>(const QTensor& w, int64_t r0, int64_t b,
                                            PackedQ4_KBlock& out) {
  pack_k_block<BlockQ4_K>(w, r0, b, out);
}

template <>
void pack_block<BlockQ5_K, PackedQ5_KBlock>(const QTensor& w, int64_t r0, int64_t b,
                                            PackedQ5_KBlock& out) {
  pack_k_block<BlockQ5_K>(w, r0, b, out);
}

// Q6_K element e (0..255) of a block: 4 low bits in ql, 2 high bits in qh.
uint8_t q6_k_value(const BlockQ6_K& b, int e) {
  const int half = e / 128, quarter = (e % 128) / 32, l = e % 32;
  const uint8_t low_byte = b.ql[64 * half + 32 * (quarter & 1) + l];
  const uint8_t low = quarter < 2 ? (low_byte & 0x0f) : (low_byte >> 4);
  const uint8_t high = (b.qh[32 * half + l] >> (2 * quarter)) & 3;
  return static_cast<uint8_t>(low | (high << 4));
}

template <>
void pack_block<BlockQ6_K, PackedQ6_KBlock>(const QTensor& w, int64_t r0, int64_t b,
                                            PackedQ6_KBlock& out) {
  for (int64_t r = 0; r < kPackedRows && r0 + r < w.rows(); ++r) {
    const BlockQ6_K& src = reinterpret_cast<const BlockQ6_K*>(w.row(r0 + r))[b];
    out.d[r] = src.d;
    for (int j = 0; j < 16; ++j) out.scales[j][r] = src.scales[j];
    for (int g = 0; g < 32; ++g) {
      const int k = g / 8, first = 64 * k + 4 * (g % 8);  // the group's low-nibble elements
      for (int c = 0; c < 4; ++c) {
        const uint8_t low = q6_k_value(src, first + c), high = q6_k_value(src, first + 32 + c);
        out.nibbles[32 * g + 4 * r + c] = static_cast<uint8_t>((low & 0x0f) | (high << 4));
        const int shift = 4 * (g % 2);
        out.qh[g / 2][4 * r + c] |=
            static_cast<uint8_t>(((low >> 4) | ((high >> 4) << 2)) << shift);
      }
    }
  }
}

template <typename Src, typename Dst>
void pack_tiles(const QTensor& w, int64_t n_blocks, uint8_t* data, ThreadPool& pool) {
  const auto n_tiles = static_cast<size_t>((w.rows() + kPackedRows - 1) / kPackedRows);
  pool.parallel_for(n_tiles, 4, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      auto* tile = reinterpret_cast<Dst*>(data) + i * static_cast<size_t>(n_blocks);
      for (int64_t b = 0; b < n_blocks; ++b) {
        pack_block<Src>(w, static_cast<int64_t>(i) * kPackedRows, b, tile[b]);
      }
    }
  });
}

}  // namespace

void PackedWeight::Free::operator()(uint8_t* p) const { std::free(p); }

Result<PackedWeight> PackedWeight::pack(const QTensor& w, ThreadPool& pool) {
  const int64_t block = traits(w.type).block_elems;
  assert(packs(w.type) && w.cols() % block == 0);
  PackedWeight p;
  p.type_ = w.type;
  p.rows_ = w.rows();
  p.n_blocks_ = w.cols() / block;
  const size_t block_bytes = w.type == TensorType::Q4_0   ? sizeof(PackedQ4_0Block)
                             : w.type == TensorType::Q4_1 ? sizeof(PackedQ4_1Block)
                             : w.type == TensorType::Q4_K ? sizeof(PackedQ4_KBlock)
                             : w.type == TensorType::Q5_K ? sizeof(PackedQ5_KBlock)
                             : w.type == TensorType::Q6_K ? sizeof(PackedQ6_KBlock)
                                                          : sizeof(PackedQ8_0Block);
  p.tile_bytes_ = static_cast<size_t>(p.n_blocks_) * block_bytes;
  const size_t bytes = (p.bytes() + kAlign - 1) / kAlign * kAlign;
  p.data_.reset(static_cast<uint8_t*>(std::aligned_alloc(kAlign, bytes)));
  if (!p.data_) {
    return make_error(StatusCode::kResourceExhausted,
                      "cannot allocate {} bytes for the packed rows of '{}'", bytes, w.name);
  }
  std::memset(p.data_.get(), 0, bytes);
  if (w.type == TensorType::Q4_0) {
    pack_tiles<BlockQ4_0, PackedQ4_0Block>(w, p.n_blocks_, p.data_.get(), pool);
  } else if (w.type == TensorType::Q4_1) {
    pack_tiles<BlockQ4_1, PackedQ4_1Block>(w, p.n_blocks_, p.data_.get(), pool);
  } else if (w.type == TensorType::Q4_K) {
    pack_tiles<BlockQ4_K, PackedQ4_KBlock>(w, p.n_blocks_, p.data_.get(), pool);
  } else if (w.type == TensorType::Q5_K) {
    pack_tiles<BlockQ5_K, PackedQ5_KBlock>(w, p.n_blocks_, p.data_.get(), pool);
  } else if (w.type == TensorType::Q6_K) {
    pack_tiles<BlockQ6_K, PackedQ6_KBlock>(w, p.n_blocks_, p.data_.get(), pool);
  } else {
    pack_tiles<BlockQ8_0, PackedQ8_0Block>(w, p.n_blocks_, p.data_.get(), pool);
  }
  return p;
}

}  // namespace llamaserve::cpu
