// Code point classes and UTF-8 helpers for the tokenizers.
//
// The classes come from a generated table (unicode_tables.inc, made by
// gen_unicode_tables.py from Python's unicodedata) so that they match what the reference
// tokenizers' regex engines mean by \p{L}, \p{N} and \s.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/utf8.h"

namespace llamaserve::unicode {

// Major general category. Values are fixed by gen_unicode_tables.py.
enum class Category : uint8_t {
  kOther = 0,  // C*: control, format, unassigned, private use, surrogate
  kLetter = 1,
  kMark = 2,
  kNumber = 3,
  kPunctuation = 4,
  kSymbol = 5,
  kSeparator = 6,
};

struct CodepointInfo {
  Category category = Category::kOther;
  bool whitespace = false;  // the Unicode White_Space property (what \s matches)
};

CodepointInfo codepoint_info(uint32_t cp);

inline bool is_letter(uint32_t cp) { return codepoint_info(cp).category == Category::kLetter; }
inline bool is_number(uint32_t cp) { return codepoint_info(cp).category == Category::kNumber; }
inline bool is_whitespace(uint32_t cp) { return codepoint_info(cp).whitespace; }

// One step of UTF-8 validation at text[pos] (pos < text.size()):
//   kComplete:   a well-formed character of `length` bytes, code point `cp`;
//   kInvalid:    `length` bytes (>= 1) form a maximal subpart of an ill-formed sequence, to be
//                replaced by one U+FFFD (the Unicode standard's recommended practice);
//   kIncomplete: the bytes up to the end of text are a proper prefix of a well-formed
//                character, so more bytes may still complete it.
// Overlong forms, surrogates and values past U+10FFFF are ill-formed.
enum class Utf8Status { kComplete, kInvalid, kIncomplete };
struct Utf8Step {
  Utf8Status status = Utf8Status::kInvalid;
  uint32_t length = 1;
  uint32_t cp = 0;
};
Utf8Step scan_utf8(std::string_view text, size_t pos);

// Decodes one character; an ill-formed or truncated sequence yields valid = false and length 1
// (the caller decides what that byte means).
struct Utf8Char {
  uint32_t cp = 0;
  uint32_t length = 1;
  bool valid = false;
};
Utf8Char decode_utf8(std::string_view text, size_t pos);

// Replaces every ill-formed or truncated subsequence with U+FFFD (one per maximal subpart).
std::string sanitize_utf8(std::string_view bytes);

}  // namespace llamaserve::unicode
