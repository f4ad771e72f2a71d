// UTF-8 validation for untrusted text (HTTP bodies). nlohmann::json throws from dump() on
// invalid UTF-8, so bodies are checked before they are parsed and every string we echo back
// is known to be valid.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace llamaserve::server {

// Byte offset of the first byte that does not start or continue a well-formed UTF-8 sequence
// (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF), or nullopt if `text` is
// valid.
std::optional<size_t> find_invalid_utf8(std::string_view text);

inline bool is_valid_utf8(std::string_view text) { return !find_invalid_utf8(text).has_value(); }

}  // namespace llamaserve::server
