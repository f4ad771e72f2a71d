// GGUF v3 writer. The file goes to a temporary name next to the target and is renamed only
// after every byte is written and synced, so readers never see a partial model; or into a
// mapping of a file descriptor the caller owns (write_mapped).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>

#include "gguf/gguf.h"

namespace llamaserve {
namespace {

constexpr uint32_t kWriteVersion = 3;
// llama.cpp refuses tensor names of 64 bytes or more (GGML_MAX_NAME); never write one.
constexpr size_t kMaxTensorNameBytes = 63;

class ByteSink {
 public:
  explicit ByteSink(std::vector<uint8_t>* out) : out_(out) {}

  template <typename T>
  void put(T value) {
    const auto* p = reinterpret_cast<const uint8_t*>(&value);
    out_->insert(out_->end(), p, p + sizeof(T));
  }
  void put_string(std::string_view s) {
    put<uint64_t>(s.size());
    out_->insert(out_->end(), s.begin(), s.end());
  }

 private:
  std::vector<uint8_t>* out_;
};

std::string int128_to_string(__int128 x) {
  return x < 0 ? std::to_string(static_cast<int64_t>(x)) : std::to_string(static_cast<uint64_t>(x));
}

template <typename T>
Status put_int(ByteSink& sink, __int128 x, GgufValueType type) {
  if (x < std::numeric_limits<T>::min() || x > std::numeric_limits<T>::max()) {
    return make_error(StatusCode::kInvalidArgument, "value {} does not fit {}", int128_to_string(x),
                      gguf_value_type_name(type));
  }
  sink.put(static_cast<T>(x));
  return Status::ok();
}

// Encodes one integer of the given GGUF type, after a range check.
Status put_integer(ByteSink& sink, GgufValueType type, __int128 x) {
  switch (type) {
    case GgufValueType::UINT8: return put_int<uint8_t>(sink, x, type);
    case GgufValueType::INT8: return put_int<int8_t>(sink, x, type);
    case GgufValueType::UINT16: return put_int<uint16_t>(sink, x, type);
    case GgufValueType::INT16: return put_int<int16_t>(sink, x, type);
    case GgufValueType::UINT32: return put_int<uint32_t>(sink, x, type);
    case GgufValueType::INT32: return put_int<int32_t>(sink, x, type);
    case GgufValueType::UINT64: return put_int<uint64_t>(sink, x, type);
    case GgufValueType::INT64: return put_int<int64_t>(sink, x, type);
    default:
      return make_error(StatusCode::kInternal, "{} is not an integer type",
                        gguf_value_type_name(type));
  }
}

Status put_array(ByteSink& sink, const GgufArray& array) {
  const GgufValueType elem = array.elem_type;
  const bool is_string = elem == GgufValueType::STRING;
  const bool is_float = elem == GgufValueType::FLOAT32 || elem == GgufValueType::FLOAT64;
  const bool is_int = !is_string && !is_float;
  if (elem == GgufValueType::ARRAY) {
    return make_error(StatusCode::kInvalidArgument, "arrays of arrays cannot be written");
  }
  if (static_cast<uint32_t>(elem) > static_cast<uint32_t>(GgufValueType::FLOAT64)) {
    return make_error(StatusCode::kInvalidArgument, "unknown array element type {}",
                      static_cast<uint32_t>(elem));
  }
  if ((!is_string && !array.strings.empty()) || (!is_float && !array.floats.empty()) ||
      (!is_int && !array.ints.empty())) {
    return make_error(StatusCode::kInvalidArgument,
                      "array of {} holds elements in a container of another type",
                      gguf_value_type_name(elem));
  }
  sink.put<uint32_t>(static_cast<uint32_t>(elem));
  sink.put<uint64_t>(array.size());
  if (is_string) {
    for (const std::string& s : array.strings) sink.put_string(s);
  } else if (elem == GgufValueType::FLOAT32) {
    for (double f : array.floats) sink.put(static_cast<float>(f));
  } else if (elem == GgufValueType::FLOAT64) {
    for (double f : array.floats) sink.put(f);
  } else if (elem == GgufValueType::BOOL) {
    for (size_t i = 0; i < array.ints.size(); ++i) {
      if (array.ints[i] != 0 && array.ints[i] != 1) {
        return make_error(StatusCode::kInvalidArgument, "BOOL element {} is {}, expected 0 or 1", i,
                          array.ints[i]);
      }
      sink.put<uint8_t>(static_cast<uint8_t>(array.ints[i]));
    }
  } else {
    for (size_t i = 0; i < array.ints.size(); ++i) {
      // UINT64 elements are stored reinterpreted in int64_t; undo that before the range check.
      const __int128 x = elem == GgufValueType::UINT64
                             ? static_cast<__int128>(static_cast<uint64_t>(array.ints[i]))
                             : static_cast<__int128>(array.ints[i]);
      Status status = put_integer(sink, elem, x);
      if (!status.is_ok()) return status.with_context(fmt::format("element {}", i));
    }
  }
  return Status::ok();
}

Status put_value(ByteSink& sink, const GgufValue& value) {
  const GgufValueType type = value.type;
  auto mismatch = [&](const char* holds) {
    return make_error(StatusCode::kInvalidArgument, "value of type {} holds {}",
                      gguf_value_type_name(type), holds);
  };
  switch (type) {
    case GgufValueType::FLOAT32:
    case GgufValueType::FLOAT64: {
      const auto* d = std::get_if<double>(&value.data);
      if (d == nullptr) return mismatch("no floating-point number");
      sink.put<uint32_t>(static_cast<uint32_t>(type));
      if (type == GgufValueType::FLOAT32) {
        sink.put(static_cast<float>(*d));
      } else {
        sink.put(*d);
      }
      return Status::ok();
    }
    case GgufValueType::BOOL: {
      const auto* b = std::get_if<bool>(&value.data);
      if (b == nullptr) return mismatch("no bool");
      sink.put<uint32_t>(static_cast<uint32_t>(type));
      sink.put<uint8_t>(*b ? 1 : 0);
      return Status::ok();
    }
    case GgufValueType::STRING: {
      const auto* s = std::get_if<std::string>(&value.data);
      if (s == nullptr) return mismatch("no string");
      sink.put<uint32_t>(static_cast<uint32_t>(type));
      sink.put_string(*s);
      return Status::ok();
    }
    case GgufValueType::ARRAY: {
      const auto* array = std::get_if<GgufArray>(&value.data);
      if (array == nullptr) return mismatch("no array");
      sink.put<uint32_t>(static_cast<uint32_t>(type));
      return put_array(sink, *array);
    }
    default: break;
  }
  __int128 x = 0;
  if (const auto* u = std::get_if<uint64_t>(&value.data)) {
    x = *u;
  } else if (const auto* i = std::get_if<int64_t>(&value.data)) {
    x = *i;
  } else if (static_cast<uint32_t>(type) > static_cast<uint32_t>(GgufValueType::FLOAT64)) {
    return make_error(StatusCode::kInvalidArgument, "unknown value type {}",
                      static_cast<uint32_t>(type));
  } else {
    return mismatch("no integer");
  }
  sink.put<uint32_t>(static_cast<uint32_t>(type));
  return put_integer(sink, type, x);
}

uint64_t align_up(uint64_t x, uint64_t alignment) { return (x + alignment - 1) & ~(alignment - 1); }

Status write_all(int fd, const uint8_t* data, size_t n_bytes) {
  while (n_bytes > 0) {
    ssize_t n = ::write(fd, data, n_bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      return make_error(StatusCode::kIo, "write failed: {}", std::strerror(errno));
    }
    data += n;
    n_bytes -= static_cast<size_t>(n);
  }
  return Status::ok();
}

Status write_zeros(int fd, uint64_t n_bytes) {
  static constexpr uint8_t kZeros[4096] = {};
  while (n_bytes > 0) {
    const size_t chunk = std::min<uint64_t>(n_bytes, sizeof(kZeros));
    LS_RETURN_IF_ERROR(write_all(fd, kZeros, chunk));
    n_bytes -= chunk;
  }
  return Status::ok();
}

}  // namespace

GgufWriter::GgufWriter(uint64_t alignment) : alignment_(alignment) {
  // Readers only learn a non-default alignment from this key. An invalid alignment is
  // reported by write()/to_bytes().
  if (alignment != kGgufDefaultAlignment && alignment <= std::numeric_limits<uint32_t>::max()) {
    set_u32("general.alignment", static_cast<uint32_t>(alignment));
  }
}

void GgufWriter::set(std::string key, GgufValue value) {
  for (auto& [existing_key, existing_value] : kv_) {
    if (existing_key == key) {
      existing_value = std::move(value);
      return;
    }
  }
  kv_.emplace_back(std::move(key), std::move(value));
}

void GgufWriter::set_u32(std::string key, uint32_t value) {
  set(std::move(key), GgufValue{GgufValueType::UINT32, uint64_t{value}});
}
void GgufWriter::set_i32(std::string key, int32_t value) {
  set(std::move(key), GgufValue{GgufValueType::INT32, int64_t{value}});
}
void GgufWriter::set_u64(std::string key, uint64_t value) {
  set(std::move(key), GgufValue{GgufValueType::UINT64, value});
}
void GgufWriter::set_f32(std::string key, float value) {
  set(std::move(key), GgufValue{GgufValueType::FLOAT32, double{value}});
}
void GgufWriter::set_bool(std::string key, bool value) {
  set(std::move(key), GgufValue{GgufValueType::BOOL, value});
}
void GgufWriter::set_string(std::string key, std::string value) {
  set(std::move(key), GgufValue{GgufValueType::STRING, std::move(value)});
}
void GgufWriter::set_string_array(std::string key, std::vector<std::string> values) {
  GgufArray array;
  array.elem_type = GgufValueType::STRING;
  array.strings = std::move(values);
  set(std::move(key), GgufValue{GgufValueType::ARRAY, std::move(array)});
}
void GgufWriter::set_f32_array(std::string key, const std::vector<float>& values) {
  GgufArray array;
  array.elem_type = GgufValueType::FLOAT32;
  array.floats.assign(values.begin(), values.end());
  set(std::move(key), GgufValue{GgufValueType::ARRAY, std::move(array)});
}
void GgufWriter::set_i32_array(std::string key, const std::vector<int32_t>& values) {
  GgufArray array;
  array.elem_type = GgufValueType::INT32;
  array.ints.assign(values.begin(), values.end());
  set(std::move(key), GgufValue{GgufValueType::ARRAY, std::move(array)});
}

Status GgufWriter::add_tensor(std::string name, TensorType type, std::vector<uint64_t> dims,
                              std::vector<uint8_t> bytes) {
  if (name.empty() || name.size() > kMaxTensorNameBytes) {
    return make_error(StatusCode::kInvalidArgument, "tensor name '{}' has {} bytes; expected 1..{}",
                      name, name.size(), kMaxTensorNameBytes);
  }
  for (const PendingTensor& t : tensors_) {
    if (t.name == name) {
      return make_error(StatusCode::kInvalidArgument, "tensor '{}' is added twice", name);
    }
  }
  const TypeTraits* traits = type_traits(static_cast<uint32_t>(type));
  if (traits == nullptr) {
    return make_error(StatusCode::kInvalidArgument, "tensor '{}': unknown tensor type id {}", name,
                      static_cast<uint32_t>(type));
  }
  if (dims.empty() || dims.size() > 4) {
    return make_error(StatusCode::kInvalidArgument, "tensor '{}' has {} dims; expected 1..4", name,
                      dims.size());
  }
  uint64_t n_elements = 1;
  for (uint64_t dim : dims) {
    if (dim == 0) {
      return make_error(StatusCode::kInvalidArgument, "tensor '{}' has a zero dimension", name);
    }
    if (__builtin_mul_overflow(n_elements, dim, &n_elements) ||
        n_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return make_error(StatusCode::kInvalidArgument, "tensor '{}': element count overflows", name);
    }
  }
  if (dims[0] % traits->block_elems != 0) {
    return make_error(StatusCode::kInvalidArgument,
                      "tensor '{}': dims[0] = {} is not a multiple of the {} block size {}", name,
                      dims[0], traits->name, traits->block_elems);
  }
  uint64_t n_bytes = 0;
  if (__builtin_mul_overflow(n_elements / traits->block_elems, uint64_t{traits->block_bytes},
                             &n_bytes) ||
      n_bytes > std::numeric_limits<size_t>::max()) {
    return make_error(StatusCode::kInvalidArgument, "tensor '{}': byte size overflows", name);
  }
  if (!bytes.empty() && bytes.size() != n_bytes) {
    return make_error(StatusCode::kInvalidArgument,
                      "tensor '{}' ({}, {} elements) needs {} bytes, got {}", name, traits->name,
                      n_elements, n_bytes, bytes.size());
  }
  tensors_.push_back({std::move(name), type, std::move(dims), std::move(bytes), n_bytes});
  return Status::ok();
}

Status GgufWriter::layout(std::vector<uint8_t>* header, std::vector<uint64_t>* tensor_offsets,
                          uint64_t* data_bytes) const {
  if (!std::has_single_bit(alignment_) || alignment_ > std::numeric_limits<uint32_t>::max()) {
    return make_error(StatusCode::kInvalidArgument,
                      "alignment {} is not a power of two that fits 32 bits", alignment_);
  }
  ByteSink sink(header);
  sink.put<uint32_t>(0x46554747);  // "GGUF"
  sink.put<uint32_t>(kWriteVersion);
  sink.put<uint64_t>(tensors_.size());
  sink.put<uint64_t>(kv_.size());
  for (const auto& [key, value] : kv_) {
    if (key == "general.alignment" && value.as_int() != static_cast<int64_t>(alignment_)) {
      return make_error(StatusCode::kInvalidArgument,
                        "metadata key 'general.alignment' disagrees with the writer's alignment {}",
                        alignment_);
    }
    sink.put_string(key);
    Status status = put_value(sink, value);
    if (!status.is_ok()) return status.with_context(fmt::format("metadata key '{}'", key));
  }
  tensor_offsets->clear();
  uint64_t offset = 0;
  for (const PendingTensor& t : tensors_) {
    offset = align_up(offset, alignment_);
    tensor_offsets->push_back(offset);
    sink.put_string(t.name);
    sink.put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
    for (uint64_t dim : t.dims) sink.put<uint64_t>(dim);
    sink.put<uint32_t>(static_cast<uint32_t>(t.type));
    sink.put<uint64_t>(offset);
    offset += t.n_bytes;
  }
  *data_bytes = align_up(offset, alignment_);
  header->resize(align_up(header->size(), alignment_), 0);
  return Status::ok();
}

Result<std::vector<uint8_t>> GgufWriter::to_bytes() const {
  for (const PendingTensor& t : tensors_) {
    if (t.bytes.empty()) {
      return make_error(StatusCode::kInvalidArgument,
                        "tensor '{}' has no bytes; to_bytes() needs every tensor's data", t.name);
    }
  }
  std::vector<uint8_t> image;
  std::vector<uint64_t> offsets;
  uint64_t data_bytes = 0;
  LS_RETURN_IF_ERROR(layout(&image, &offsets, &data_bytes));
  const size_t data_start = image.size();
  image.resize(data_start + data_bytes, 0);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    std::memcpy(image.data() + data_start + offsets[i], tensors_[i].bytes.data(),
                tensors_[i].bytes.size());
  }
  return image;
}

Status GgufWriter::check_fill(const TensorFill& fill) const {
  for (const PendingTensor& t : tensors_) {
    if (t.bytes.empty() && !fill) {
      return make_error(StatusCode::kInvalidArgument,
                        "tensor '{}' was added without bytes and no fill callback was given",
                        t.name);
    }
  }
  return Status::ok();
}

Status GgufWriter::write(const std::string& path, const TensorFill& fill) const {
  LS_RETURN_IF_ERROR(check_fill(fill));
  std::vector<uint8_t> header;
  std::vector<uint64_t> offsets;
  uint64_t data_bytes = 0;
  LS_RETURN_IF_ERROR(layout(&header, &offsets, &data_bytes));

  std::string temp_path = path + ".tmp.XXXXXX";
  int fd = mkstemp(temp_path.data());
  if (fd < 0) {
    return make_error(StatusCode::kIo, "cannot create a temporary file next to '{}': {}", path,
                      std::strerror(errno));
  }
  auto write_contents = [&]() -> Status {
    LS_RETURN_IF_ERROR(write_all(fd, header.data(), header.size()));
    std::vector<uint8_t> scratch;
    uint64_t written = 0;  // bytes of the data section so far
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const PendingTensor& t = tensors_[i];
      LS_RETURN_IF_ERROR(write_zeros(fd, offsets[i] - written));
      const uint8_t* bytes = t.bytes.data();
      if (t.bytes.empty()) {
        scratch.resize(t.n_bytes);
        Status status = fill(i, scratch.data(), t.n_bytes);
        if (!status.is_ok()) return status.with_context(fmt::format("filling tensor '{}'", t.name));
        bytes = scratch.data();
      }
      LS_RETURN_IF_ERROR(write_all(fd, bytes, t.n_bytes));
      written = offsets[i] + t.n_bytes;
    }
    LS_RETURN_IF_ERROR(write_zeros(fd, data_bytes - written));
    if (fchmod(fd, 0644) != 0 || fsync(fd) != 0) {
      return make_error(StatusCode::kIo, "cannot finish the file: {}", std::strerror(errno));
    }
    return Status::ok();
  };
  Status status = write_contents();
  if (::close(fd) != 0 && status.is_ok()) {
    status = make_error(StatusCode::kIo, "close failed: {}", std::strerror(errno));
  }
  if (status.is_ok() && std::rename(temp_path.c_str(), path.c_str()) != 0) {
    status = make_error(StatusCode::kIo, "cannot rename '{}' to '{}': {}", temp_path, path,
                        std::strerror(errno));
  }
  if (!status.is_ok()) {
    ::unlink(temp_path.c_str());
    return status.with_context(fmt::format("writing '{}'", path));
  }
  return Status::ok();
}

Status GgufWriter::write_mapped(int fd, const TensorFill& fill) const {
  LS_RETURN_IF_ERROR(check_fill(fill));
  std::vector<uint8_t> header;
  std::vector<uint64_t> offsets;
  uint64_t data_bytes = 0;
  LS_RETURN_IF_ERROR(layout(&header, &offsets, &data_bytes));
  const uint64_t total = header.size() + data_bytes;
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    return make_error(StatusCode::kIo, "cannot stat file descriptor {}: {}", fd,
                      std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode) || st.st_size != 0) {
    return make_error(StatusCode::kInvalidArgument,
                      "file descriptor {} is not an empty regular file ({} bytes)", fd,
                      static_cast<int64_t>(st.st_size));
  }
  if (total > static_cast<uint64_t>(std::numeric_limits<off_t>::max()) ||
      ftruncate(fd, static_cast<off_t>(total)) != 0) {
    return make_error(StatusCode::kIo, "cannot size the file to {} bytes: {}", total,
                      std::strerror(errno));
  }
  void* addr = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (addr == MAP_FAILED) {
    return make_error(StatusCode::kIo, "cannot map {} bytes for writing: {}", total,
                      std::strerror(errno));
  }
  // ftruncate left the padding between tensors zero.
  auto* base = static_cast<uint8_t*>(addr);
  std::memcpy(base, header.data(), header.size());
  Status status;
  for (size_t i = 0; i < tensors_.size() && status.is_ok(); ++i) {
    const PendingTensor& t = tensors_[i];
    uint8_t* out = base + header.size() + offsets[i];
    if (!t.bytes.empty()) {
      std::memcpy(out, t.bytes.data(), t.n_bytes);
    } else {
      status = fill(i, out, t.n_bytes);
      if (!status.is_ok()) status = status.with_context(fmt::format("filling tensor '{}'", t.name));
    }
  }
  if (munmap(addr, total) != 0 && status.is_ok()) {
    status = make_error(StatusCode::kIo, "munmap failed: {}", std::strerror(errno));
  }
  return status;
}

}  // namespace llamaserve
