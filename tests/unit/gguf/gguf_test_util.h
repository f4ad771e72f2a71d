// Shared pieces of the GGUF tests: a sample file holding every value type and several tensor
// types, and helpers that locate and patch fields inside a serialized image.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"

namespace llamaserve::gguf_test {

// Bytes that differ per tensor (seed) and per position, so misplaced data is caught.
// tests/py/test_gguf_interop.py computes the same pattern.
inline std::vector<uint8_t> pattern_bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> bytes(n);
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
  return bytes;
}

struct SampleTensor {
  const char* name;
  TensorType type;
  std::vector<uint64_t> dims;
  size_t n_bytes;
};

// The tensors of the sample file, in file order. Their seeds are 1 + 17 * index.
inline const std::vector<SampleTensor>& sample_tensors() {
  static const std::vector<SampleTensor> tensors = {
      {"tok_embd.weight", TensorType::F32, {4, 3}, 48},
      {"norm.weight", TensorType::F16, {6}, 12},
      {"blk.0.q8.weight", TensorType::Q8_0, {64, 2}, 4 * 34},
      {"blk.0.q4k.weight", TensorType::Q4_K, {256}, 144},
      {"ids", TensorType::I32, {5}, 20},
      {"cube", TensorType::BF16, {2, 2, 2, 2}, 32},
  };
  return tensors;
}

inline uint8_t sample_seed(size_t tensor_index) {
  return static_cast<uint8_t>(1 + 17 * tensor_index);
}

inline GgufValue int_value(GgufValueType type, int64_t v) { return GgufValue{type, v}; }
inline GgufValue uint_value(GgufValueType type, uint64_t v) { return GgufValue{type, v}; }

inline GgufValue array_value(GgufValueType elem, std::vector<int64_t> ints) {
  GgufArray array;
  array.elem_type = elem;
  array.ints = std::move(ints);
  return GgufValue{GgufValueType::ARRAY, std::move(array)};
}

inline GgufValue float_array_value(GgufValueType elem, std::vector<double> floats) {
  GgufArray array;
  array.elem_type = elem;
  array.floats = std::move(floats);
  return GgufValue{GgufValueType::ARRAY, std::move(array)};
}

// Every value type, scalar and array. The Python interop test expects these exact values;
// change both together.
inline void add_sample_metadata(GgufWriter& writer) {
  using T = GgufValueType;
  writer.set_string("general.architecture", "llama");
  writer.set_string("general.name", "gguf roundtrip");
  writer.set("test.u8", uint_value(T::UINT8, 200));
  writer.set("test.i8", int_value(T::INT8, -100));
  writer.set("test.u16", uint_value(T::UINT16, 60000));
  writer.set("test.i16", int_value(T::INT16, -30000));
  writer.set_u32("test.u32", 4000000000u);
  writer.set_i32("test.i32", -2000000000);
  writer.set_u64("test.u64", std::numeric_limits<uint64_t>::max());
  writer.set("test.i64", int_value(T::INT64, std::numeric_limits<int64_t>::min()));
  writer.set_f32("test.f32", 3.25f);
  writer.set("test.f64", GgufValue{T::FLOAT64, -1.5e300});
  writer.set_bool("test.bool_true", true);
  writer.set_bool("test.bool_false", false);
  writer.set_string("test.string", "h\xC3\xA9llo w\xC3\xB6rld \xE2\x9C\x93");
  writer.set_string("test.empty_string", "");
  writer.set("test.arr_u8", array_value(T::UINT8, {0, 1, 255}));
  writer.set("test.arr_i8", array_value(T::INT8, {-128, 0, 127}));
  writer.set("test.arr_u16", array_value(T::UINT16, {0, 65535}));
  writer.set("test.arr_i16", array_value(T::INT16, {-32768, 32767}));
  writer.set("test.arr_u32", array_value(T::UINT32, {0, 4294967295}));
  writer.set_i32_array("test.arr_i32", {std::numeric_limits<int32_t>::min(), 7,
                                        std::numeric_limits<int32_t>::max()});
  // UINT64 elements are kept reinterpreted in int64_t: -1 is 2^64 - 1.
  writer.set("test.arr_u64", array_value(T::UINT64, {0, -1}));
  writer.set("test.arr_i64", array_value(T::INT64, {std::numeric_limits<int64_t>::min(),
                                                    std::numeric_limits<int64_t>::max()}));
  writer.set_f32_array("test.arr_f32", {0.5f, -2.0f, 1024.125f});
  writer.set("test.arr_f64", float_array_value(T::FLOAT64, {0.1, -1e-300}));
  writer.set("test.arr_bool", array_value(T::BOOL, {1, 0, 1}));
  writer.set_string_array("test.arr_string",
                          {"alpha", "", "\xC3\xBCn\xC3\xAF \xE2\x9C\x93", "with space"});
  writer.set("test.arr_empty", array_value(T::INT32, {}));
}

inline void add_sample_tensors(GgufWriter& writer) {
  const auto& tensors = sample_tensors();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const SampleTensor& t = tensors[i];
    Status status =
        writer.add_tensor(t.name, t.type, t.dims, pattern_bytes(t.n_bytes, sample_seed(i)));
    ASSERT_TRUE(status.is_ok()) << status.to_string();
  }
}

inline std::vector<uint8_t> sample_image(uint64_t alignment = 32) {
  GgufWriter writer(alignment);
  add_sample_metadata(writer);
  add_sample_tensors(writer);
  auto bytes = writer.to_bytes();
  EXPECT_TRUE(bytes.is_ok()) << bytes.status().to_string();
  return bytes.is_ok() ? *bytes : std::vector<uint8_t>{};
}

inline Result<std::unique_ptr<GgufFile>> parse_image(const std::vector<uint8_t>& image,
                                                     const GgufLimits& limits = {}) {
  return GgufFile::parse(image.data(), image.size(), limits);
}

// Offset of the first byte of `text` where it is stored as a GGUF string (after its u64
// length). Fails the test if the string is absent.
inline size_t find_gguf_string(const std::vector<uint8_t>& image, std::string_view text) {
  std::vector<uint8_t> needle(8 + text.size());
  const uint64_t length = text.size();
  std::memcpy(needle.data(), &length, 8);
  std::memcpy(needle.data() + 8, text.data(), text.size());
  for (size_t i = 0; i + needle.size() <= image.size(); ++i) {
    if (std::memcmp(image.data() + i, needle.data(), needle.size()) == 0) return i + 8;
  }
  ADD_FAILURE() << "string '" << text << "' not found in the image";
  return 0;
}

// Offset of the value type (u32) of metadata key `key`; its value follows at +4.
inline size_t key_type_offset(const std::vector<uint8_t>& image, std::string_view key) {
  return find_gguf_string(image, key) + key.size();
}

// Offsets inside the tensor info of `name`.
struct TensorInfoOffsets {
  size_t n_dims;
  size_t dims;
  size_t type;
  size_t data_offset;
};

inline TensorInfoOffsets tensor_info_offsets(const std::vector<uint8_t>& image,
                                             std::string_view name) {
  const size_t n_dims_at = find_gguf_string(image, name) + name.size();
  uint32_t n_dims = 0;
  std::memcpy(&n_dims, image.data() + n_dims_at, 4);
  const size_t type_at = n_dims_at + 4 + 8 * size_t{n_dims};
  return {n_dims_at, n_dims_at + 4, type_at, type_at + 4};
}

template <typename T>
void patch(std::vector<uint8_t>& image, size_t offset, T value) {
  ASSERT_LE(offset + sizeof(T), image.size());
  std::memcpy(image.data() + offset, &value, sizeof(T));
}

template <typename T>
T peek(const std::vector<uint8_t>& image, size_t offset) {
  T value{};
  std::memcpy(&value, image.data() + offset, sizeof(T));
  return value;
}

}  // namespace llamaserve::gguf_test
