#include "backend/cpu/kv_cache.h"

#include <cstring>
#include <new>

#include "backend/cpu/simd.h"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace llamaserve::cpu {
namespace {

void store_row(TensorType type, const float* src, void* dst, int64_t n) {
  if (type == TensorType::F32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  if (type == TensorType::Q8_0) {
    (void)quantize_row(type, src, dst, n);  // n % 32 == 0: checked by create()
    return;
  }
  auto* out = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) store_f16x8(out + i, _mm256_loadu_ps(src + i));
  for (; i < n; ++i) out[i] = f32_to_f16(src[i]);
}

// A key of n values (F16 or F32) into a dimension-major head block: value d at
// dst[d * stride], converted as store_row converts.
void store_column(TensorType type, const float* src, void* dst, int64_t n, int64_t stride) {
  if (type == TensorType::F32) {
    auto* out = static_cast<float*>(dst);
    for (int64_t d = 0; d < n; ++d) out[d * stride] = src[d];
    return;
  }
  auto* out = static_cast<uint16_t*>(dst);
  int64_t d = 0;
  for (; d + 8 <= n; d += 8) {
    uint16_t halves[8];
    store_f16x8(halves, _mm256_loadu_ps(src + d));
    for (int i = 0; i < 8; ++i) out[(d + i) * stride] = halves[i];
  }
  for (; d < n; ++d) out[d * stride] = f32_to_f16(src[d]);
}

float load_element(TensorType type, const uint8_t* base, int64_t i) {
  switch (type) {
    case TensorType::F32: return reinterpret_cast<const float*>(base)[i];
    case TensorType::Q8_0: {
      const BlockQ8_0& block = reinterpret_cast<const BlockQ8_0*>(base)[i / kQK8_0];
      return half_to_float(block.d) * static_cast<float>(block.qs[i % kQK8_0]);
    }
    default: return half_to_float(Half{reinterpret_cast<const uint16_t*>(base)[i]});
  }
}

}  // namespace

Result<std::unique_ptr<CpuKvCache>> CpuKvCache::create(const KvCacheGeometry& g) {
  if (g.type != TensorType::F16 && g.type != TensorType::F32 && g.type != TensorType::Q8_0) {
    return make_error(StatusCode::kUnsupported,
                      "KV cache type {} is not supported on the CPU (use F16, F32 or Q8_0)",
                      type_name(g.type));
  }
  if (g.type == TensorType::Q8_0 && g.head_dim % kQK8_0 != 0) {
    return make_error(StatusCode::kUnsupported,
                      "a Q8_0 KV cache needs a head dimension that is a multiple of {}, not {}",
                      kQK8_0, g.head_dim);
  }
  if (g.n_layers <= 0 || g.first_layer < 0 || g.block_size <= 0 || g.n_blocks <= 0 ||
      g.kv_dim() <= 0) {
    return make_error(
        StatusCode::kInvalidArgument,
        "KV cache geometry must be positive: layers {}, block_size {}, n_blocks {}, kv_dim {}",
        g.n_layers, g.block_size, g.n_blocks, g.kv_dim());
  }
  const uint64_t per_array = g.bytes_per_block() / 2 * static_cast<uint64_t>(g.n_blocks);
  if (per_array / static_cast<uint64_t>(g.n_blocks) != g.bytes_per_block() / 2 ||
      per_array > (1ull << 46)) {
    return make_error(StatusCode::kResourceExhausted,
                      "KV cache of {} blocks x {} bytes is too large", g.n_blocks,
                      g.bytes_per_block());
  }
  std::unique_ptr<CpuKvCache> cache(new CpuKvCache(g));
  // Uninitialised on purpose: the kernel hands out zero pages lazily.
  cache->k_.reset(new (std::nothrow) uint8_t[per_array]);
  cache->v_.reset(new (std::nothrow) uint8_t[per_array]);
  if (!cache->k_ || !cache->v_) {
    return make_error(StatusCode::kResourceExhausted, "cannot allocate a KV cache of 2 x {} bytes",
                      per_array);
  }
  return cache;
}

KvCacheInfo CpuKvCache::info() const {
  KvCacheInfo info;
  info.n_blocks = geometry_.n_blocks;
  info.block_size = geometry_.block_size;
  info.bytes_per_block = geometry_.bytes_per_block();
  return info;
}

void CpuKvCache::write_tokens(const Batch& batch, int32_t layer, const float* k_rows,
                              const float* v_rows, int32_t begin, int32_t end) {
  const int64_t kv_dim = geometry_.kv_dim();
  const int64_t hd = geometry_.head_dim;
  const size_t slot_offset = geometry_.row_bytes();
  // A dimension-major key's values lie an element apart from the next slot's.
  const size_t key_slot_offset = slot_offset / static_cast<size_t>(hd);
  for (int32_t t = begin; t < end; ++t) {
    const int32_t pos = batch.positions[t];
    const int32_t block = batch.block_table(batch.seq_index[t])[pos / geometry_.block_size];
    const size_t slot = static_cast<size_t>(pos % geometry_.block_size);
    for (int64_t h = 0; h < geometry_.n_head_kv; ++h) {
      const float* key = k_rows + t * kv_dim + h * hd;
      if (geometry_.keys_dim_major()) {
        store_column(geometry_.type, key, head_ptr(k_, layer, block, h) + slot * key_slot_offset,
                     hd, geometry_.block_size);
      } else {
        store_row(geometry_.type, key, head_ptr(k_, layer, block, h) + slot * slot_offset, hd);
      }
      store_row(geometry_.type, v_rows + t * kv_dim + h * hd,
                head_ptr(v_, layer, block, h) + slot * slot_offset, hd);
    }
  }
}

float CpuKvCache::key(int32_t layer, int32_t block, int64_t kv_head, int32_t slot,
                      int64_t d) const {
  const int64_t i =
      geometry_.keys_dim_major() ? d * geometry_.block_size + slot : slot * geometry_.head_dim + d;
  return load_element(geometry_.type, head_ptr(k_, layer, block, kv_head), i);
}

float CpuKvCache::value(int32_t layer, int32_t block, int64_t kv_head, int32_t slot,
                        int64_t d) const {
  return load_element(geometry_.type, head_ptr(v_, layer, block, kv_head),
                      slot * geometry_.head_dim + d);
}

}  // namespace llamaserve::cpu
