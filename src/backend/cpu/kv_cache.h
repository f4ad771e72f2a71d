// Paged KV cache in host memory. For each layer of the range it holds, K and V are arrays of
// n_blocks blocks of block_size tokens × n_head_kv heads × head_dim values, stored as F16
// (default: half the bytes of F32 for attention to read), F32, or Q8_0 (a head's row of
// head_dim values as GGUF Q8_0 blocks of 32: a scale and 32 signed bytes, about half the bytes
// of F16). Inside a block the heads come one after the other, so that attention streams one
// head's keys of a block as one contiguous run; within a head, V (and Q8_0's K) is
// [block_size] rows of head_dim values, while the K of an F16 or F32 cache is dimension-major,
// [head_dim][block_size] (value d of slot s at d * block_size + s), so that attention scores a
// run of keys a register without summing across lanes.
// Block ids come from the engine's BlockManager; every layer uses the same ids.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "backend/batch.h"
#include "core/status.h"
#include "quant/types.h"

namespace llamaserve::cpu {

struct KvCacheGeometry {
  int32_t first_layer = 0;
  int32_t n_layers = 0;
  int32_t block_size = 16;  // tokens per block
  int32_t n_blocks = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  TensorType type = TensorType::F16;  // F16, F32 or Q8_0 (head_dim a multiple of 32)

  int64_t kv_dim() const { return n_head_kv * head_dim; }
  // One head's head_dim values of one token.
  size_t row_bytes() const { return llamaserve::row_bytes(type, static_cast<size_t>(head_dim)); }
  // Whether K is stored dimension-major inside a block and head (see above).
  bool keys_dim_major() const { return type != TensorType::Q8_0; }
  size_t slot_bytes() const { return static_cast<size_t>(n_head_kv) * row_bytes(); }
  // K and V of one block across the held layers.
  uint64_t bytes_per_block() const { return 2ull * n_layers * block_size * slot_bytes(); }
};

class CpuKvCache {
 public:
  // Validates the geometry and reserves the memory (pages are committed on first write, so a
  // large cache costs nothing until it is used).
  static Result<std::unique_ptr<CpuKvCache>> create(const KvCacheGeometry& geometry);

  const KvCacheGeometry& geometry() const { return geometry_; }
  KvCacheInfo info() const;

  // The block_size keys of one KV head in one block: slot s's row at s * row_bytes(), or with
  // keys_dim_major() value d of slot s at element d * block_size + s.
  // PRECONDITION: layer within the held range, 0 <= block < n_blocks, 0 <= kv_head < n_head_kv.
  const void* k(int32_t layer, int32_t block, int64_t kv_head) const {
    return head_ptr(k_, layer, block, kv_head);
  }
  const void* v(int32_t layer, int32_t block, int64_t kv_head) const {
    return head_ptr(v_, layer, block, kv_head);
  }

  // Stores K/V rows (kv_dim floats per token row, row stride kv_dim) of every token of
  // `batch` at its position's slot of its sequence's block table.
  // PRECONDITION: the batch was validated against info().
  void write(const Batch& batch, int32_t layer, const float* k_rows, const float* v_rows) {
    write_tokens(batch, layer, k_rows, v_rows, 0, batch.n_tokens());
  }
  // The same for tokens [begin, end) of `batch` only (k_rows and v_rows still hold row 0 first):
  // disjoint ranges may be written by different threads at once.
  void write_tokens(const Batch& batch, int32_t layer, const float* k_rows, const float* v_rows,
                    int32_t begin, int32_t end);

  // Value d of slot `slot`'s key / value in one KV head of one block, as a float (a Q8_0 one
  // scaled), wherever the layout keeps it: for references and tests, not for kernels.
  float key(int32_t layer, int32_t block, int64_t kv_head, int32_t slot, int64_t d) const;
  float value(int32_t layer, int32_t block, int64_t kv_head, int32_t slot, int64_t d) const;

 private:
  explicit CpuKvCache(const KvCacheGeometry& geometry) : geometry_(geometry) {}
  uint8_t* head_ptr(const std::unique_ptr<uint8_t[]>& base, int32_t layer, int32_t block,
                    int64_t kv_head) const {
    const size_t block_index =
        static_cast<size_t>(layer - geometry_.first_layer) * geometry_.n_blocks + block;
    const size_t head_bytes = geometry_.block_size * geometry_.row_bytes();
    return base.get() + (block_index * geometry_.n_head_kv + kv_head) * head_bytes;
  }

  KvCacheGeometry geometry_;
  std::unique_ptr<uint8_t[]> k_;
  std::unique_ptr<uint8_t[]> v_;
};

}  // namespace llamaserve::cpu
