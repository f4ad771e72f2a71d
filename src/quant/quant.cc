#include "quant/quant.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/thread_pool.h"
#include "quant/blocks.h"
#include "quant/quantize_blocks.h"

namespace llamaserve {
namespace {

// The one table from a runtime type to its block codec. Blocks are copied through a local
// (memcpy) so that no caller has to guarantee the alignment of a mapped file's bytes.
struct Codec {
  TensorType type;
  int block_elems;  // 1 for plain types
  size_t block_bytes;
  void (*decode)(const void* block, float* y);
  void (*encode)(const float* x, void* block);
};

template <typename Block, void (*Decode)(const Block&, float*)>
void decode_block(const void* src, float* y) {
  Block block;
  std::memcpy(&block, src, sizeof block);
  Decode(block, y);
}

template <typename Block, void (*Encode)(const float*, Block*)>
void encode_block(const float* x, void* dst) {
  Block block;
  Encode(x, &block);
  std::memcpy(dst, &block, sizeof block);
}

void decode_f32(const void* src, float* y) { std::memcpy(y, src, sizeof(float)); }
void encode_f32(const float* x, void* dst) { std::memcpy(dst, x, sizeof(float)); }

void decode_f16(const void* src, float* y) {
  Half h;
  std::memcpy(&h, src, sizeof h);
  *y = half_to_float(h);
}
void encode_f16(const float* x, void* dst) {
  const Half h = float_to_half(*x);
  std::memcpy(dst, &h, sizeof h);
}

void decode_bf16(const void* src, float* y) {
  BF16 h;
  std::memcpy(&h, src, sizeof h);
  *y = bf16_to_float(h);
}
void encode_bf16(const float* x, void* dst) {
  const BF16 h = float_to_bf16(*x);
  std::memcpy(dst, &h, sizeof h);
}

using namespace quant_internal;

constexpr Codec kCodecs[] = {
    {TensorType::F32, 1, 4, decode_f32, encode_f32},
    {TensorType::F16, 1, 2, decode_f16, encode_f16},
    {TensorType::BF16, 1, 2, decode_bf16, encode_bf16},
    {TensorType::Q8_0, kQK8_0, sizeof(BlockQ8_0), decode_block<BlockQ8_0, dequantize_block_q8_0>,
     encode_block<BlockQ8_0, quantize_block_q8_0>},
    {TensorType::Q4_0, kQK4_0, sizeof(BlockQ4_0), decode_block<BlockQ4_0, dequantize_block_q4_0>,
     encode_block<BlockQ4_0, quantize_block_q4_0>},
    {TensorType::Q4_1, kQK4_1, sizeof(BlockQ4_1), decode_block<BlockQ4_1, dequantize_block_q4_1>,
     encode_block<BlockQ4_1, quantize_block_q4_1>},
    {TensorType::Q4_K, kQK_K, sizeof(BlockQ4_K), decode_block<BlockQ4_K, dequantize_block_q4_k>,
     encode_block<BlockQ4_K, quantize_block_q4_k>},
    {TensorType::Q5_K, kQK_K, sizeof(BlockQ5_K), decode_block<BlockQ5_K, dequantize_block_q5_k>,
     encode_block<BlockQ5_K, quantize_block_q5_k>},
    {TensorType::Q6_K, kQK_K, sizeof(BlockQ6_K), decode_block<BlockQ6_K, dequantize_block_q6_k>,
     encode_block<BlockQ6_K, quantize_block_q6_k>},
};

constexpr int kMaxBlockElems = kQK_K;

const Codec* find_codec(TensorType type) {
  for (const Codec& codec : kCodecs) {
    if (codec.type == type) return &codec;
  }
  return nullptr;
}

// Preconditions of the row functions; the codec on success.
Result<const Codec*> codec_for_row(TensorType type, int64_t n) {
  const Codec* codec = find_codec(type);
  if (codec == nullptr) {
    const TypeTraits* traits = type_traits(static_cast<uint32_t>(type));
    return make_error(StatusCode::kUnsupported, "tensor type {} (id {}) cannot be converted",
                      traits != nullptr ? traits->name : "unknown", static_cast<uint32_t>(type));
  }
  if (n < 0 || n % codec->block_elems != 0) {
    return make_error(StatusCode::kInvalidArgument,
                      "a row of {} elements is not a whole number of {} blocks ({} elements each)",
                      n, type_name(type), codec->block_elems);
  }
  return codec;
}

void dequantize_with(const Codec& codec, const void* src, float* dst, int64_t n) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / codec.block_elems; ++b) {
    codec.decode(bytes + b * codec.block_bytes, dst + b * codec.block_elems);
  }
}

void quantize_with(const Codec& codec, const float* src, void* dst, int64_t n) {
  auto* bytes = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n / codec.block_elems; ++b) {
    codec.encode(src + b * codec.block_elems, bytes + b * codec.block_bytes);
  }
}

}  // namespace

bool quant_supported(TensorType type) { return find_codec(type) != nullptr; }

Status check_row(TensorType type, int64_t n_elems) { return codec_for_row(type, n_elems).status(); }

Status dequantize_row(TensorType type, const void* src, float* dst, int64_t n) {
  LS_ASSIGN_OR_RETURN(const Codec* codec, codec_for_row(type, n));
  dequantize_with(*codec, src, dst, n);
  return Status::ok();
}

Status quantize_row(TensorType type, const float* src, void* dst, int64_t n) {
  LS_ASSIGN_OR_RETURN(const Codec* codec, codec_for_row(type, n));
  quantize_with(*codec, src, dst, n);
  return Status::ok();
}

Status quantize_tensor(TensorType type, const float* src, void* dst, int64_t n_rows, int64_t n_cols,
                       ThreadPool* pool) {
  LS_ASSIGN_OR_RETURN(const Codec* codec, codec_for_row(type, n_cols));
  if (n_rows < 0) {
    return make_error(StatusCode::kInvalidArgument, "negative row count {}", n_rows);
  }
  const size_t dst_row_bytes =
      static_cast<size_t>(n_cols / codec->block_elems) * codec->block_bytes;
  auto* dst_bytes = static_cast<uint8_t*>(dst);
  auto quantize_rows = [&](size_t begin, size_t end) {
    for (size_t row = begin; row < end; ++row) {
      quantize_with(*codec, src + row * n_cols, dst_bytes + row * dst_row_bytes, n_cols);
    }
  };
  if (pool == nullptr) {
    quantize_rows(0, static_cast<size_t>(n_rows));
  } else {
    pool->parallel_for(static_cast<size_t>(n_rows), 1, quantize_rows);
  }
  return Status::ok();
}

float dot_row(TensorType wtype, const void* w_row, const float* x, int64_t n) {
  const Codec* codec = find_codec(wtype);
  if (codec == nullptr || n < 0 || n % codec->block_elems != 0) {
    return std::numeric_limits<float>::quiet_NaN();
  }
  // Blocks of plain types are single elements; decode them in chunks of kMaxBlockElems.
  const int chunk_elems = codec->block_elems == 1 ? kMaxBlockElems : codec->block_elems;
  const size_t chunk_bytes =
      static_cast<size_t>(chunk_elems / codec->block_elems) * codec->block_bytes;
  const auto* bytes = static_cast<const uint8_t*>(w_row);
  float w[kMaxBlockElems];
  double sum = 0;  // double: this is the accuracy reference optimized kernels are held to
  for (int64_t begin = 0; begin < n; begin += chunk_elems) {
    const int64_t count = std::min<int64_t>(chunk_elems, n - begin);
    dequantize_with(*codec, bytes + begin / chunk_elems * chunk_bytes, w, count);
    for (int64_t i = 0; i < count; ++i) sum += static_cast<double>(w[i]) * x[begin + i];
  }
  return static_cast<float>(sum);
}

Result<TensorType> parse_tensor_type(std::string_view name) {
  auto equal_ignoring_case = [](std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (std::toupper(static_cast<unsigned char>(a[i])) !=
          std::toupper(static_cast<unsigned char>(b[i]))) {
        return false;
      }
    }
    return true;
  };
  std::string supported;
  for (const Codec& codec : kCodecs) {
    if (equal_ignoring_case(name, type_name(codec.type))) return codec.type;
    supported += supported.empty() ? "" : ", ";
    supported += type_name(codec.type);
  }
  return make_error(StatusCode::kInvalidArgument, "unknown tensor type '{}' (supported: {})", name,
                    supported);
}

}  // namespace llamaserve
