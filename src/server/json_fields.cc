#include "server/json_fields.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace llamaserve::server {

using nlohmann::json;

const char* json_type_name(const json& value) {
  switch (value.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a non-integer number";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "an unsupported value";
  }
}

Status invalid(std::string message) {
  return Status(StatusCode::kInvalidArgument, std::move(message));
}

Status wrong_type(std::string_view name, std::string_view expected, const json& value) {
  return invalid(fmt::format("'{}' must be {}, got {}", name, expected, json_type_name(value)));
}

const json* find_field(const json& object, std::string_view key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

Status read_bool(const json& object, std::string_view key, bool& out) {
  const json* value = find_field(object, key);
  if (value == nullptr) return Status::ok();
  if (!value->is_boolean()) return wrong_type(key, "a boolean", *value);
  out = value->get<bool>();
  return Status::ok();
}

Status read_string(const json& object, std::string_view key, std::string& out) {
  const json* value = find_field(object, key);
  if (value == nullptr) return Status::ok();
  if (!value->is_string()) return wrong_type(key, "a string", *value);
  out = value->get<std::string>();
  return Status::ok();
}

Status read_int(const json& object, std::string_view key, int64_t min_value, int64_t max_value,
                std::optional<int64_t>& out, std::string_view limit_note) {
  const json* value = find_field(object, key);
  if (value == nullptr) return Status::ok();
  bool in_range;
  std::string shown;
  if (value->is_number_float()) {
    // A whole number written with a fraction or an exponent (2.0, 1e3: JSON Schema counts them
    // as integers, and some serializers write them so), or one past 64 bits (which the parser
    // keeps as a double).
    const double v = value->get<double>();
    if (!std::isfinite(v) || v != std::floor(v)) return wrong_type(key, "an integer", *value);
    in_range = v >= static_cast<double>(min_value) && v <= static_cast<double>(max_value);
    shown = fmt::format("{:.0f}", v);
    if (in_range) out = static_cast<int64_t>(v);
  } else if (!value->is_number_integer()) {
    return wrong_type(key, "an integer", *value);
  } else if (value->is_number_unsigned()) {
    const auto v = value->get<uint64_t>();
    in_range =
        v <= static_cast<uint64_t>(max_value) && (min_value <= 0 || v >= uint64_t(min_value));
    shown = std::to_string(v);
    if (in_range) out = static_cast<int64_t>(v);
  } else {
    const auto v = value->get<int64_t>();
    in_range = v >= min_value && v <= max_value;
    shown = std::to_string(v);
    if (in_range) out = v;
  }
  if (!in_range) {
    return invalid(fmt::format("'{}' must be between {} and {}{}, got {}", key, min_value,
                               max_value, limit_note, shown));
  }
  return Status::ok();
}

Status read_float(const json& object, std::string_view key, FloatRange range, float& out) {
  const json* value = find_field(object, key);
  if (value == nullptr) return Status::ok();
  if (!value->is_number()) return wrong_type(key, "a number", *value);
  const double v = value->get<double>();
  const bool above_min = range.min_exclusive ? v > range.min_value : v >= range.min_value;
  if (!std::isfinite(v) || !above_min || v > range.max_value) {
    return invalid(fmt::format("'{}' must be {} {} and <= {}, got {}", key,
                               range.min_exclusive ? ">" : ">=", range.min_value, range.max_value,
                               v));
  }
  out = static_cast<float>(v);
  return Status::ok();
}

Status read_token_array(const json& array, std::string_view name, std::vector<int32_t>& out) {
  out.reserve(array.size());
  for (size_t i = 0; i < array.size(); ++i) {
    const json& item = array[i];
    if (!item.is_number_integer()) {
      return wrong_type(fmt::format("{}[{}]", name, i), "an integer token id", item);
    }
    const bool in_range =
        item.is_number_unsigned()
            ? item.get<uint64_t>() <= uint64_t(std::numeric_limits<int32_t>::max())
            : item.get<int64_t>() >= 0 &&
                  item.get<int64_t>() <= std::numeric_limits<int32_t>::max();
    if (!in_range) {
      return invalid(fmt::format("'{}[{}]' is not a valid token id: {}", name, i, item.dump()));
    }
    out.push_back(item.get<int32_t>());
  }
  return Status::ok();
}

}  // namespace llamaserve::server
