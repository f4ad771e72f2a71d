// GgufValue accessors and the lookups of GgufFile that do not parse anything.
#include <limits>

#include "gguf/gguf.h"

namespace llamaserve {

const char* gguf_value_type_name(GgufValueType type) {
  switch (type) {
    case GgufValueType::UINT8: return "UINT8";
    case GgufValueType::INT8: return "INT8";
    case GgufValueType::UINT16: return "UINT16";
    case GgufValueType::INT16: return "INT16";
    case GgufValueType::UINT32: return "UINT32";
    case GgufValueType::INT32: return "INT32";
    case GgufValueType::FLOAT32: return "FLOAT32";
    case GgufValueType::BOOL: return "BOOL";
    case GgufValueType::STRING: return "STRING";
    case GgufValueType::ARRAY: return "ARRAY";
    case GgufValueType::UINT64: return "UINT64";
    case GgufValueType::INT64: return "INT64";
    case GgufValueType::FLOAT64: return "FLOAT64";
  }
  return "UNKNOWN";
}

size_t GgufArray::size() const {
  switch (elem_type) {
    case GgufValueType::STRING: return strings.size();
    case GgufValueType::FLOAT32:
    case GgufValueType::FLOAT64: return floats.size();
    default: return ints.size();
  }
}

std::optional<int64_t> GgufValue::as_int() const {
  if (const auto* u = std::get_if<uint64_t>(&data)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&data)) return *i;
  if (const auto* b = std::get_if<bool>(&data)) return *b ? 1 : 0;
  return std::nullopt;
}

std::optional<double> GgufValue::as_float() const {
  if (const auto* d = std::get_if<double>(&data)) return *d;
  if (const auto* u = std::get_if<uint64_t>(&data)) return static_cast<double>(*u);
  if (const auto* i = std::get_if<int64_t>(&data)) return static_cast<double>(*i);
  return std::nullopt;
}

std::optional<bool> GgufValue::as_bool() const {
  if (const auto* b = std::get_if<bool>(&data)) return *b;
  return std::nullopt;
}

const std::string* GgufValue::as_string() const { return std::get_if<std::string>(&data); }

const GgufArray* GgufValue::as_array() const { return std::get_if<GgufArray>(&data); }

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
  const GgufValue* value = find(key);
  const std::string* s = value ? value->as_string() : nullptr;
  if (s == nullptr) return std::nullopt;
  return *s;
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  const GgufValue* value = find(key);
  return value ? value->as_int() : std::nullopt;
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const GgufValue* value = find(key);
  return value ? value->as_float() : std::nullopt;
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* value = find(key);
  return value ? value->as_bool() : std::nullopt;
}

const GgufArray* GgufFile::get_array(std::string_view key) const {
  const GgufValue* value = find(key);
  return value ? value->as_array() : nullptr;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

std::string describe_source(const GgufFile& file) {
  return file.path().empty() ? std::string("the GGUF image") : fmt::format("'{}'", file.path());
}

}  // namespace

Status require_keys(const GgufFile& file, std::initializer_list<std::string_view> keys) {
  std::string missing;
  size_t n_missing = 0;
  for (std::string_view key : keys) {
    if (file.find(key) != nullptr) continue;
    missing += fmt::format("{}'{}'", n_missing == 0 ? "" : ", ", key);
    ++n_missing;
  }
  if (n_missing == 0) return Status::ok();
  return make_error(StatusCode::kNotFound, "{} is missing required metadata key{} {}",
                    describe_source(file), n_missing == 1 ? "" : "s", missing);
}

Status require_tensors(const GgufFile& file, std::initializer_list<std::string_view> names) {
  std::string missing;
  size_t n_missing = 0;
  for (std::string_view name : names) {
    if (file.find_tensor(name) != nullptr) continue;
    missing += fmt::format("{}'{}'", n_missing == 0 ? "" : ", ", name);
    ++n_missing;
  }
  if (n_missing == 0) return Status::ok();
  return make_error(StatusCode::kNotFound, "{} is missing required tensor{} {}",
                    describe_source(file), n_missing == 1 ? "" : "s", missing);
}

}  // namespace llamaserve
