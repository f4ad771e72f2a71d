// GGUF v2/v3 files: parsed metadata, tensor directory, and mmap'd tensor data.
//
// File layout (little-endian):
//   magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv × { string key | u32 value_type | value }
//   n_tensors × { string name | u32 n_dims | u64 dims[n_dims] | u32 type | u64 offset }
//   padding to `general.alignment` (default 32) | tensor data (offsets relative to here)
// A string is u64 length + bytes (no terminator). An array is u32 element type + u64 count
// + elements.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/mapped_file.h"
#include "core/status.h"
#include "quant/types.h"

namespace llamaserve {

enum class GgufValueType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};

const char* gguf_value_type_name(GgufValueType type);

// An array value: the element type and the elements, widened to one of three containers.
// Integers (and bools) go to `ints`, floats to `floats`, strings to `strings`. Nested arrays
// are rejected by the reader (no tokenizer or model key uses them).
struct GgufArray {
  GgufValueType elem_type = GgufValueType::UINT8;
  std::vector<int64_t> ints;  // also holds UINT64 values reinterpreted; bools as 0/1
  std::vector<double> floats;
  std::vector<std::string> strings;
  size_t size() const;
};

// A scalar keeps its declared type; accessors below convert when lossless.
struct GgufValue {
  GgufValueType type = GgufValueType::UINT8;
  std::variant<uint64_t, int64_t, double, bool, std::string, GgufArray> data;

  std::optional<int64_t> as_int() const;   // any integer type that fits, or bool
  std::optional<double> as_float() const;  // any float or integer type
  std::optional<bool> as_bool() const;
  const std::string* as_string() const;
  const GgufArray* as_array() const;
};

struct GgufTensorInfo {
  std::string name;
  TensorType type = TensorType::F32;
  std::vector<uint64_t> dims;  // GGUF order: dims[0] is the innermost (contiguous) axis
  uint64_t offset = 0;         // relative to the start of the data section
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;

  // Rows of dims[0] elements each (product of the outer dims).
  uint64_t n_rows() const { return dims.empty() ? 0 : n_elements / dims[0]; }
};

// Bounds that keep a hostile file from making the reader allocate without limit. The
// defaults admit every real model (vocab of a few hundred thousand, a few thousand tensors).
struct GgufLimits {
  uint64_t max_kv = 1 << 16;
  uint64_t max_tensors = 1 << 20;
  uint64_t max_string_bytes = 1 << 24;       // one string
  uint64_t max_array_elems = 1 << 24;        // one array
  uint64_t max_metadata_bytes = 1ull << 31;  // all strings and arrays together, as parsed
  uint32_t max_dims = 4;
};

class GgufFile {
 public:
  // Maps and parses the file. Validates the header, every metadata value, every tensor info,
  // alignment, and that every tensor's bytes lie inside the file without overlapping.
  static Result<std::unique_ptr<GgufFile>> open(const std::string& path,
                                                const GgufLimits& limits = {});

  // Parses a file image already in memory (tests, fuzzing). `data` must outlive the result.
  static Result<std::unique_ptr<GgufFile>> parse(const uint8_t* data, size_t size,
                                                 const GgufLimits& limits = {});

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // file offset of the data section
  size_t file_size() const { return size_; }
  const std::string& path() const { return path_; }

  // Metadata in file order, and lookup by key.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(std::string_view key) const;

  // Typed getters: nullopt when the key is absent or its value does not convert.
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  const GgufArray* get_array(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  // Pointer to the tensor's first byte inside the mapping.
  const uint8_t* tensor_data(const GgufTensorInfo& info) const {
    return base_ + data_offset_ + info.offset;
  }

 private:
  GgufFile() = default;
  Status parse_impl(const GgufLimits& limits);

  std::unique_ptr<MappedFile> mapping_;  // null when parsed from caller-owned memory
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// The alignment of tensor data when `general.alignment` does not say.
inline constexpr uint64_t kGgufDefaultAlignment = 32;

// Builds a GGUF v3 file: metadata in insertion order, tensors laid out with the alignment.
// Tensor bytes are either given up front or streamed later in the order they were added
// (so that a 13 GB model never sits in memory at once).
class GgufWriter {
 public:
  explicit GgufWriter(uint64_t alignment = 32);

  void set(std::string key, GgufValue value);  // replaces an existing key, keeps its position
  void set_u32(std::string key, uint32_t value);
  void set_i32(std::string key, int32_t value);
  void set_u64(std::string key, uint64_t value);
  void set_f32(std::string key, float value);
  void set_bool(std::string key, bool value);
  void set_string(std::string key, std::string value);
  void set_string_array(std::string key, std::vector<std::string> values);
  void set_f32_array(std::string key, const std::vector<float>& values);
  void set_i32_array(std::string key, const std::vector<int32_t>& values);

  // dims in GGUF order (innermost first). `bytes` may be empty, then write_tensor_data()
  // must deliver it later; otherwise it must be exactly the tensor's size.
  Status add_tensor(std::string name, TensorType type, std::vector<uint64_t> dims,
                    std::vector<uint8_t> bytes = {});

  // Writes everything to `path` (via a temporary file renamed on success, so a failed write
  // leaves no partial file). For tensors added without bytes, `fill(index, out)` is called
  // in order and must write exactly the tensor's byte count into `out`.
  using TensorFill = std::function<Status(size_t tensor_index, uint8_t* out, size_t n_bytes)>;
  Status write(const std::string& path, const TensorFill& fill = nullptr) const;

  // Writes everything into `fd`, an empty file opened for reading and writing (a memfd, for a
  // model that never touches the disk): sizes it, maps it shared and fills the mapping in
  // place, so `fill` writes each tensor's final pages directly, from as many threads as it
  // likes. On failure the file's contents are unspecified; the caller discards it.
  Status write_mapped(int fd, const TensorFill& fill = nullptr) const;

  // The complete file image in memory (tests, fuzz seeds). All tensors must have bytes.
  Result<std::vector<uint8_t>> to_bytes() const;

 private:
  struct PendingTensor {
    std::string name;
    TensorType type;
    std::vector<uint64_t> dims;
    std::vector<uint8_t> bytes;
    uint64_t n_bytes = 0;
  };
  // Every tensor without bytes needs `fill`.
  Status check_fill(const TensorFill& fill) const;
  // Serializes everything before the data section and assigns each tensor its data offset.
  Status layout(std::vector<uint8_t>* header, std::vector<uint64_t>* tensor_offsets,
                uint64_t* data_bytes) const;

  uint64_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<PendingTensor> tensors_;
};

// Checks that every listed metadata key (or tensor) exists; the error names all the missing
// ones at once and the file, so a model loader can report everything in one message.
Status require_keys(const GgufFile& file, std::initializer_list<std::string_view> keys);
Status require_tensors(const GgufFile& file, std::initializer_list<std::string_view> names);

}  // namespace llamaserve
