// Python str operations on UTF-8 text with provenance: indexes count code points (a byte that
// is not valid UTF-8 counts as one), and every result keeps the taint of the bytes it copies.
// Case mapping is ASCII-only (non-ASCII letters are left as they are).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jinja/value.h"

namespace llamaserve::jinja {

// Byte offset of each code point, plus the text's size at the end.
std::vector<size_t> code_point_offsets(std::string_view text);
size_t code_point_count(std::string_view text);

// Python's slice.indices(): the positions a slice visits in a sequence of `length` items.
std::vector<int64_t> slice_positions(int64_t length, std::optional<int64_t> start,
                                     std::optional<int64_t> stop, std::optional<int64_t> step);

StringData slice_text(const StringData& s, const std::vector<int64_t>& positions);

// strip / lstrip / rstrip: `chars` empty means whitespace.
enum class StripSide { kBoth, kLeft, kRight };
StringData strip_text(const StringData& s, StripSide side, const std::optional<std::string>& chars);

// split(sep, maxsplit): no sep splits on runs of whitespace.
std::vector<StringData> split_text(const StringData& s, const std::optional<std::string>& sep,
                                   int64_t maxsplit);

// Replaces occurrences of `from` (count < 0: all); an inserted copy of `to` is tainted where
// `to` is, or all of it when the text it replaces was tainted.
StringData replace_text(const StringData& s, const std::string& from, const StringData& to,
                        int64_t count);

enum class CaseMap { kUpper, kLower, kTitle, kCapitalize };
StringData map_case(const StringData& s, CaseMap mode);

bool is_space_char(char c);

}  // namespace llamaserve::jinja
