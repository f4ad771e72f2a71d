// GGUF v2/v3 reader. Every read is bounds-checked against the image, and every count read
// from the file is checked against GgufLimits and against the bytes that remain before
// anything is allocated for it, so a hostile file can neither read out of bounds nor make
// the reader allocate more than a small multiple of the file's own size.
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <numeric>

#include <fmt/ranges.h>

#include "gguf/gguf.h"

namespace llamaserve {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader copies little-endian values straight from the file");

constexpr uint32_t kMaxValueType = static_cast<uint32_t>(GgufValueType::FLOAT64);
// Smallest encoded size of one metadata entry: key length, value type, a 1-byte value.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
// Smallest encoded tensor info: name length, n_dims, one dim, type, offset.
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;

// Bytes one array element occupies at least in the file (a string: its length field).
uint64_t min_encoded_size(GgufValueType type) {
  switch (type) {
    case GgufValueType::UINT8:
    case GgufValueType::INT8:
    case GgufValueType::BOOL: return 1;
    case GgufValueType::UINT16:
    case GgufValueType::INT16: return 2;
    case GgufValueType::UINT32:
    case GgufValueType::INT32:
    case GgufValueType::FLOAT32: return 4;
    case GgufValueType::UINT64:
    case GgufValueType::INT64:
    case GgufValueType::FLOAT64:
    case GgufValueType::STRING: return 8;
    case GgufValueType::ARRAY: return 4 + 8;
  }
  return 1;
}

bool is_integer_type(GgufValueType type) {
  switch (type) {
    case GgufValueType::UINT8:
    case GgufValueType::INT8:
    case GgufValueType::UINT16:
    case GgufValueType::INT16:
    case GgufValueType::UINT32:
    case GgufValueType::INT32:
    case GgufValueType::UINT64:
    case GgufValueType::INT64: return true;
    default: return false;
  }
}

std::string format_dims(const std::vector<uint64_t>& dims) {
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

// A read position in the image. Errors name the field, its byte offset and the file size.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  size_t size() const { return size_; }
  size_t offset() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }
  const uint8_t* here() const { return data_ + pos_; }

  // `what` and `what_suffix` name the field; they are joined only when building an error.
  Status need(uint64_t n_bytes, std::string_view what, std::string_view what_suffix = {}) const {
    if (n_bytes <= remaining()) return Status::ok();
    return make_error(
        StatusCode::kInvalidArgument,
        "truncated file: {}{} needs {} bytes at offset {}, but the file ends at byte {}", what,
        what_suffix, n_bytes, pos_, size_);
  }

  template <typename T>
  Status read(T* out, std::string_view what, std::string_view what_suffix = {}) {
    LS_RETURN_IF_ERROR(need(sizeof(T), what, what_suffix));
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::ok();
  }

  // PRECONDITION: need(n_bytes) succeeded.
  void skip(size_t n_bytes) { pos_ += n_bytes; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

class Parser {
 public:
  Parser(const uint8_t* data, size_t size, const GgufLimits& limits)
      : cur_(data, size), limits_(limits) {}

  Cursor& cursor() { return cur_; }

  // Counts bytes held by parsed strings and arrays against max_metadata_bytes before they
  // are allocated.
  Status charge(uint64_t n_bytes, std::string_view what) {
    if (n_bytes > limits_.max_metadata_bytes - used_bytes_) {
      return make_error(StatusCode::kOutOfRange,
                        "{} at offset {} would bring the parsed metadata to more than {} bytes "
                        "(GgufLimits::max_metadata_bytes)",
                        what, cur_.offset(), limits_.max_metadata_bytes);
    }
    used_bytes_ += n_bytes;
    return Status::ok();
  }

  Status read_string(std::string* out, std::string_view what) {
    uint64_t length = 0;
    size_t length_offset = cur_.offset();
    LS_RETURN_IF_ERROR(cur_.read(&length, what, " length"));
    if (length > limits_.max_string_bytes) {
      return make_error(StatusCode::kOutOfRange,
                        "{} length {} at offset {} exceeds the limit of {} bytes "
                        "(GgufLimits::max_string_bytes)",
                        what, length, length_offset, limits_.max_string_bytes);
    }
    LS_RETURN_IF_ERROR(cur_.need(length, what));
    LS_RETURN_IF_ERROR(charge(length, what));
    out->assign(reinterpret_cast<const char*>(cur_.here()), length);
    cur_.skip(length);
    return Status::ok();
  }

  Status read_value_type(GgufValueType* out, std::string_view what) {
    uint32_t raw = 0;
    size_t type_offset = cur_.offset();
    LS_RETURN_IF_ERROR(cur_.read(&raw, what));
    if (raw > kMaxValueType) {
      return make_error(StatusCode::kInvalidArgument,
                        "{} at offset {} is {}, which is not a GGUF value type (expected 0..{})",
                        what, type_offset, raw, kMaxValueType);
    }
    *out = static_cast<GgufValueType>(raw);
    return Status::ok();
  }

  Status read_bool(bool* out) {
    uint8_t byte = 0;
    size_t byte_offset = cur_.offset();
    LS_RETURN_IF_ERROR(cur_.read(&byte, "BOOL value"));
    if (byte > 1) {
      return make_error(StatusCode::kInvalidArgument,
                        "invalid BOOL byte {:#04x} at offset {} (expected 0 or 1)", byte,
                        byte_offset);
    }
    *out = byte == 1;
    return Status::ok();
  }

  Status read_value(GgufValueType type, GgufValue* out) {
    out->type = type;
    switch (type) {
      case GgufValueType::UINT8: return read_scalar<uint8_t, uint64_t>(out);
      case GgufValueType::INT8: return read_scalar<int8_t, int64_t>(out);
      case GgufValueType::UINT16: return read_scalar<uint16_t, uint64_t>(out);
      case GgufValueType::INT16: return read_scalar<int16_t, int64_t>(out);
      case GgufValueType::UINT32: return read_scalar<uint32_t, uint64_t>(out);
      case GgufValueType::INT32: return read_scalar<int32_t, int64_t>(out);
      case GgufValueType::UINT64: return read_scalar<uint64_t, uint64_t>(out);
      case GgufValueType::INT64: return read_scalar<int64_t, int64_t>(out);
      case GgufValueType::FLOAT32: return read_scalar<float, double>(out);
      case GgufValueType::FLOAT64: return read_scalar<double, double>(out);
      case GgufValueType::BOOL: {
        bool b = false;
        LS_RETURN_IF_ERROR(read_bool(&b));
        out->data = b;
        return Status::ok();
      }
      case GgufValueType::STRING: {
        std::string s;
        LS_RETURN_IF_ERROR(read_string(&s, "string value"));
        out->data = std::move(s);
        return Status::ok();
      }
      case GgufValueType::ARRAY: {
        GgufArray array;
        LS_RETURN_IF_ERROR(read_array(&array));
        out->data = std::move(array);
        return Status::ok();
      }
    }
    return make_error(StatusCode::kInternal, "unhandled value type {}",
                      static_cast<uint32_t>(type));
  }

 private:
  template <typename Stored, typename Widened>
  Status read_scalar(GgufValue* out) {
    Stored v{};
    LS_RETURN_IF_ERROR(cur_.read(&v, gguf_value_type_name(out->type), " value"));
    out->data = static_cast<Widened>(v);
    return Status::ok();
  }

  // PRECONDITION: count * sizeof(Stored) bytes remain (checked by read_array).
  template <typename Stored, typename Widened>
  void read_fixed_elems(uint64_t count, std::vector<Widened>* out) {
    out->resize(count);
    const uint8_t* src = cur_.here();
    for (uint64_t i = 0; i < count; ++i) {
      Stored v;
      std::memcpy(&v, src + i * sizeof(Stored), sizeof(Stored));
      (*out)[i] = static_cast<Widened>(v);  // UINT64 above INT64_MAX wraps, as documented
    }
    cur_.skip(count * sizeof(Stored));
  }

  Status read_array(GgufArray* out) {
    LS_RETURN_IF_ERROR(read_value_type(&out->elem_type, "array element type"));
    const GgufValueType elem = out->elem_type;
    if (elem == GgufValueType::ARRAY) {
      return make_error(StatusCode::kUnsupported,
                        "nested array (element type ARRAY) at offset {}; arrays of arrays are "
                        "not supported",
                        cur_.offset() - 4);
    }
    uint64_t count = 0;
    size_t count_offset = cur_.offset();
    LS_RETURN_IF_ERROR(cur_.read(&count, "array length"));
    if (count > limits_.max_array_elems) {
      return make_error(StatusCode::kOutOfRange,
                        "array length {} at offset {} exceeds the limit of {} elements "
                        "(GgufLimits::max_array_elems)",
                        count, count_offset, limits_.max_array_elems);
    }
    const uint64_t min_bytes = min_encoded_size(elem);
    if (count > cur_.remaining() / min_bytes) {
      return make_error(StatusCode::kInvalidArgument,
                        "truncated file: array of {} {} elements at offset {} needs at least {} "
                        "bytes, but the file ends at byte {}",
                        count, gguf_value_type_name(elem), count_offset, count * min_bytes,
                        cur_.size());
    }
    // count is now at most the file size, so the products below cannot overflow.
    switch (elem) {
      case GgufValueType::STRING: {
        LS_RETURN_IF_ERROR(charge(count * sizeof(std::string), "string array"));
        out->strings.reserve(count);
        for (uint64_t i = 0; i < count; ++i) {
          std::string s;
          Status status = read_string(&s, "string element");
          if (!status.is_ok())
            return status.with_context(fmt::format("element {} of {}", i, count));
          out->strings.push_back(std::move(s));
        }
        return Status::ok();
      }
      case GgufValueType::FLOAT32:
      case GgufValueType::FLOAT64:
        LS_RETURN_IF_ERROR(charge(count * sizeof(double), "float array"));
        if (elem == GgufValueType::FLOAT32) {
          read_fixed_elems<float>(count, &out->floats);
        } else {
          read_fixed_elems<double>(count, &out->floats);
        }
        return Status::ok();
      case GgufValueType::BOOL:
        LS_RETURN_IF_ERROR(charge(count * sizeof(int64_t), "bool array"));
        out->ints.reserve(count);
        for (uint64_t i = 0; i < count; ++i) {
          bool b = false;
          Status status = read_bool(&b);
          if (!status.is_ok())
            return status.with_context(fmt::format("element {} of {}", i, count));
          out->ints.push_back(b ? 1 : 0);
        }
        return Status::ok();
      default: break;
    }
    LS_RETURN_IF_ERROR(charge(count * sizeof(int64_t), "integer array"));
    switch (elem) {
      case GgufValueType::UINT8: read_fixed_elems<uint8_t>(count, &out->ints); break;
      case GgufValueType::INT8: read_fixed_elems<int8_t>(count, &out->ints); break;
      case GgufValueType::UINT16: read_fixed_elems<uint16_t>(count, &out->ints); break;
      case GgufValueType::INT16: read_fixed_elems<int16_t>(count, &out->ints); break;
      case GgufValueType::UINT32: read_fixed_elems<uint32_t>(count, &out->ints); break;
      case GgufValueType::INT32: read_fixed_elems<int32_t>(count, &out->ints); break;
      case GgufValueType::UINT64: read_fixed_elems<uint64_t>(count, &out->ints); break;
      case GgufValueType::INT64: read_fixed_elems<int64_t>(count, &out->ints); break;
      default:
        return make_error(StatusCode::kInternal, "unhandled array element type {}",
                          gguf_value_type_name(elem));
    }
    return Status::ok();
  }

  Cursor cur_;
  const GgufLimits& limits_;
  uint64_t used_bytes_ = 0;
};

Status read_tensor_info(Parser& parser, const GgufLimits& limits, GgufTensorInfo* info) {
  Cursor& cur = parser.cursor();
  uint32_t n_dims = 0;
  const size_t n_dims_offset = cur.offset();
  LS_RETURN_IF_ERROR(cur.read(&n_dims, "n_dims"));
  if (n_dims == 0 || n_dims > limits.max_dims) {
    return make_error(StatusCode::kInvalidArgument, "n_dims is {} at offset {}; expected 1..{}",
                      n_dims, n_dims_offset, limits.max_dims);
  }
  info->dims.resize(n_dims);
  for (uint32_t d = 0; d < n_dims; ++d) {
    const size_t dim_offset = cur.offset();
    LS_RETURN_IF_ERROR(cur.read(&info->dims[d], "dimension"));
    if (info->dims[d] == 0) {
      return make_error(StatusCode::kInvalidArgument, "dims[{}] is 0 at offset {}", d, dim_offset);
    }
  }
  uint64_t n_elements = 1;
  for (uint64_t dim : info->dims) {
    if (__builtin_mul_overflow(n_elements, dim, &n_elements) ||
        n_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return make_error(StatusCode::kInvalidArgument,
                        "element count of dims {} overflows a signed 64-bit integer",
                        format_dims(info->dims));
    }
  }
  info->n_elements = n_elements;

  uint32_t raw_type = 0;
  const size_t type_offset = cur.offset();
  LS_RETURN_IF_ERROR(cur.read(&raw_type, "tensor type"));
  const TypeTraits* traits = type_traits(raw_type);
  if (traits == nullptr) {
    return make_error(StatusCode::kUnsupported,
                      "unknown tensor type id {} at offset {} (this build knows F32, F16, BF16, "
                      "Q4_0..Q8_1, Q2_K..Q8_K, I8..I64, F64)",
                      raw_type, type_offset);
  }
  info->type = static_cast<TensorType>(raw_type);
  if (info->dims[0] % traits->block_elems != 0) {
    return make_error(StatusCode::kInvalidArgument,
                      "type {} packs {} elements per block, but dims[0] = {} (dims {}) is not a "
                      "multiple of {}",
                      traits->name, traits->block_elems, info->dims[0], format_dims(info->dims),
                      traits->block_elems);
  }
  if (__builtin_mul_overflow(n_elements / traits->block_elems, uint64_t{traits->block_bytes},
                             &info->n_bytes)) {
    return make_error(StatusCode::kInvalidArgument, "byte size of {} dims {} overflows 64 bits",
                      traits->name, format_dims(info->dims));
  }
  LS_RETURN_IF_ERROR(cur.read(&info->offset, "data offset"));
  return Status::ok();
}

// Every tensor lies inside the file, at an aligned offset, and no two share a byte.
Status check_tensor_placement(const std::vector<GgufTensorInfo>& tensors, uint64_t data_offset,
                              uint64_t alignment, uint64_t file_size) {
  for (const GgufTensorInfo& info : tensors) {
    if (info.offset % alignment != 0) {
      return make_error(StatusCode::kInvalidArgument,
                        "tensor '{}': data offset {} is not a multiple of the alignment {}",
                        info.name, info.offset, alignment);
    }
    uint64_t begin = 0;
    uint64_t end = 0;
    if (__builtin_add_overflow(data_offset, info.offset, &begin) ||
        __builtin_add_overflow(begin, info.n_bytes, &end) || end > file_size) {
      return make_error(StatusCode::kInvalidArgument,
                        "tensor '{}' ({} {}, {} bytes at data offset {}) ends past the end of the "
                        "file: the data section starts at byte {} and the file has {} bytes",
                        info.name, type_name(info.type), format_dims(info.dims), info.n_bytes,
                        info.offset, data_offset, file_size);
    }
  }
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return tensors[a].offset < tensors[b].offset; });
  for (size_t i = 1; i < order.size(); ++i) {
    const GgufTensorInfo& prev = tensors[order[i - 1]];
    const GgufTensorInfo& next = tensors[order[i]];
    if (prev.offset + prev.n_bytes > next.offset) {  // both end inside the file: no overflow
      return make_error(StatusCode::kInvalidArgument,
                        "tensors '{}' (data bytes [{}, {})) and '{}' (data bytes [{}, {})) overlap",
                        prev.name, prev.offset, prev.offset + prev.n_bytes, next.name, next.offset,
                        next.offset + next.n_bytes);
    }
  }
  return Status::ok();
}

Status check_magic(Cursor& cur) {
  if (cur.remaining() == 0) {
    return make_error(StatusCode::kInvalidArgument, "file is empty (expected a GGUF header)");
  }
  uint8_t magic[4] = {};
  size_t n = std::min<size_t>(4, cur.remaining());
  std::memcpy(magic, cur.here(), n);
  if (n == 4 && std::memcmp(magic, "GGUF", 4) == 0) {
    cur.skip(4);
    return Status::ok();
  }
  std::string found;
  for (size_t i = 0; i < n; ++i) found += fmt::format("{}{:02x}", i ? " " : "", magic[i]);
  if (n < 4) {
    return make_error(StatusCode::kInvalidArgument,
                      "truncated file: {} bytes, too short for the magic 'GGUF' at offset 0 "
                      "(found bytes {})",
                      n, found);
  }
  // Legacy formats store their magic as a little-endian u32: 'ggml', 'ggmf', 'ggjt'.
  const bool legacy = std::memcmp(magic, "lmgg", 4) == 0 || std::memcmp(magic, "fmgg", 4) == 0 ||
                      std::memcmp(magic, "tjgg", 4) == 0;
  return make_error(StatusCode::kInvalidArgument,
                    "not a GGUF file: expected magic 'GGUF' (47 47 55 46) at offset 0, found "
                    "bytes {}{}",
                    found,
                    legacy ? " (a legacy GGML/GGJT file; convert it to GGUF with a current "
                             "converter)"
                           : "");
}

Status check_version(uint32_t version) {
  if (version == 2 || version == 3) return Status::ok();
  if (version == 1) {
    return make_error(StatusCode::kUnsupported,
                      "GGUF version 1 (at offset 4) is not supported; expected version 2 or 3 "
                      "(convert the model again with a current converter)");
  }
  const uint32_t swapped = __builtin_bswap32(version);
  if (swapped >= 1 && swapped <= 3) {
    return make_error(StatusCode::kUnsupported,
                      "GGUF version field at offset 4 reads {:#010x}: this is a big-endian GGUF "
                      "file, which is not supported (expected a little-endian version 2 or 3)",
                      version);
  }
  return make_error(StatusCode::kUnsupported,
                    "unsupported GGUF version {} at offset 4; expected version 2 or 3", version);
}

}  // namespace

Status GgufFile::parse_impl(const GgufLimits& limits) {
  Parser parser(base_, size_, limits);
  Cursor& cur = parser.cursor();

  LS_RETURN_IF_ERROR(check_magic(cur));
  LS_RETURN_IF_ERROR(cur.read(&version_, "version"));
  LS_RETURN_IF_ERROR(check_version(version_));
  uint64_t n_tensors = 0;
  uint64_t n_kv = 0;
  LS_RETURN_IF_ERROR(cur.read(&n_tensors, "tensor count"));
  LS_RETURN_IF_ERROR(cur.read(&n_kv, "metadata entry count"));

  if (n_tensors > limits.max_tensors) {
    return make_error(StatusCode::kOutOfRange,
                      "header declares {} tensors (offset 8), more than the limit of {} "
                      "(GgufLimits::max_tensors)",
                      n_tensors, limits.max_tensors);
  }
  if (n_kv > limits.max_kv) {
    return make_error(StatusCode::kOutOfRange,
                      "header declares {} metadata entries (offset 16), more than the limit of {} "
                      "(GgufLimits::max_kv)",
                      n_kv, limits.max_kv);
  }
  if (n_kv > cur.remaining() / kMinKvBytes) {
    return make_error(StatusCode::kInvalidArgument,
                      "truncated file: header declares {} metadata entries, which need at least {} "
                      "bytes after offset {}, but the file ends at byte {}",
                      n_kv, n_kv * kMinKvBytes, cur.offset(), size_);
  }

  kv_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key;
    const size_t key_offset = cur.offset();
    Status status = parser.read_string(&key, "key");
    if (!status.is_ok()) {
      return status.with_context(fmt::format("metadata entry {} of {}", i, n_kv));
    }
    if (auto it = kv_index_.find(key); it != kv_index_.end()) {
      return make_error(StatusCode::kInvalidArgument,
                        "duplicate metadata key '{}' at offset {} (entry {} repeats entry {})", key,
                        key_offset, i, it->second);
    }
    GgufValue value;
    status = parser.read_value_type(&value.type, "value type");
    if (status.is_ok()) status = parser.read_value(value.type, &value);
    if (!status.is_ok()) return status.with_context(fmt::format("metadata key '{}'", key));
    kv_index_.emplace(key, kv_.size());
    kv_.emplace_back(std::move(key), std::move(value));
  }

  if (const GgufValue* value = find("general.alignment")) {
    std::optional<int64_t> alignment = value->as_int();
    if (!is_integer_type(value->type) || !alignment) {
      return make_error(StatusCode::kInvalidArgument,
                        "metadata key 'general.alignment' must be an unsigned integer, found {}",
                        gguf_value_type_name(value->type));
    }
    if (*alignment <= 0 || !std::has_single_bit(static_cast<uint64_t>(*alignment))) {
      return make_error(StatusCode::kInvalidArgument,
                        "metadata key 'general.alignment' must be a power of two greater than 0, "
                        "found {}",
                        *alignment);
    }
    alignment_ = static_cast<uint64_t>(*alignment);
  } else {
    alignment_ = kGgufDefaultAlignment;
  }

  if (n_tensors > cur.remaining() / kMinTensorInfoBytes) {
    return make_error(StatusCode::kInvalidArgument,
                      "truncated file: header declares {} tensors, whose infos need at least {} "
                      "bytes after offset {}, but the file ends at byte {}",
                      n_tensors, n_tensors * kMinTensorInfoBytes, cur.offset(), size_);
  }
  tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo info;
    Status status = parser.read_string(&info.name, "tensor name");
    if (!status.is_ok())
      return status.with_context(fmt::format("tensor info {} of {}", i, n_tensors));
    status = read_tensor_info(parser, limits, &info);
    if (!status.is_ok()) {
      return status.with_context(
          fmt::format("tensor '{}' (info {} of {})", info.name, i, n_tensors));
    }
    if (auto it = tensor_index_.find(info.name); it != tensor_index_.end()) {
      return make_error(StatusCode::kInvalidArgument,
                        "duplicate tensor name '{}' (tensor info {} repeats tensor info {})",
                        info.name, i, it->second);
    }
    tensor_index_.emplace(info.name, tensors_.size());
    tensors_.push_back(std::move(info));
  }

  // The data section starts at the next multiple of the alignment. A file without tensors
  // may end before that point (vocab-only files often do), so only tensors are checked
  // against the file size.
  const uint64_t header_end = cur.offset();
  if (__builtin_add_overflow(header_end, alignment_ - 1, &data_offset_)) {
    return make_error(StatusCode::kInvalidArgument,
                      "alignment {} puts the data section past any possible file size", alignment_);
  }
  data_offset_ &= ~(alignment_ - 1);
  return check_tensor_placement(tensors_, data_offset_, alignment_, size_);
}

Result<std::unique_ptr<GgufFile>> GgufFile::parse(const uint8_t* data, size_t size,
                                                  const GgufLimits& limits) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->base_ = data;
  file->size_ = size;
  LS_RETURN_IF_ERROR(file->parse_impl(limits));
  return file;
}

Result<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path,
                                                 const GgufLimits& limits) {
  LS_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> mapping, MappedFile::open(path));
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->base_ = mapping->data();
  file->size_ = mapping->size();
  file->path_ = path;
  file->mapping_ = std::move(mapping);
  Status status = file->parse_impl(limits);
  if (!status.is_ok()) return status.with_context(fmt::format("GGUF file '{}'", path));
  return file;
}

}  // namespace llamaserve
