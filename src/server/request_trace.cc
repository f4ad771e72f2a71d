#include "server/request_trace.h"

#include <algorithm>

namespace llamaserve::server {
namespace {

bool is_lower_hex(std::string_view text) {
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool all_zero(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return c == '0'; });
}

}  // namespace

std::string accepted_request_id(std::string_view value) {
  constexpr size_t kMaxLength = 128;
  constexpr std::string_view kPunctuation = "._~:/+=@-";
  if (value.empty() || value.size() > kMaxLength) return {};
  for (char c : value) {
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alnum && kPunctuation.find(c) == std::string_view::npos) return {};
  }
  return std::string(value);
}

TraceParent parse_traceparent(std::string_view value) {
  // version "-" trace-id "-" parent-id "-" flags: 2 + 1 + 32 + 1 + 16 + 1 + 2 characters.
  constexpr size_t kLength = 55;
  if (value.size() < kLength || value[2] != '-' || value[35] != '-' || value[52] != '-') return {};
  const std::string_view version = value.substr(0, 2);
  const std::string_view trace_id = value.substr(3, 32);
  const std::string_view parent_id = value.substr(36, 16);
  const std::string_view flags = value.substr(53, 2);
  if (!is_lower_hex(version) || version == "ff" || !is_lower_hex(trace_id) ||
      !is_lower_hex(parent_id) || !is_lower_hex(flags) || all_zero(trace_id) ||
      all_zero(parent_id)) {
    return {};
  }
  if (value.size() > kLength && (version == "00" || value[kLength] != '-')) return {};
  return {std::string(value), std::string(trace_id), std::string(parent_id)};
}

}  // namespace llamaserve::server
