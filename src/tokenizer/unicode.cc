#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>

namespace llamaserve::unicode {
namespace {

struct UnicodeRange {
  uint32_t first;
  uint32_t last;
  uint8_t value;  // Category | 0x80 when White_Space
};

#include "tokenizer/unicode_tables.inc"

constexpr uint8_t kWhitespaceFlag = 0x80;

uint8_t lookup_value(uint32_t cp) {
  const auto* end = std::end(kUnicodeRanges);
  // First range whose last code point is >= cp.
  const auto* it = std::lower_bound(std::begin(kUnicodeRanges), end, cp,
                                    [](const UnicodeRange& r, uint32_t c) { return r.last < c; });
  if (it == end || it->first > cp) return 0;
  return it->value;
}

// ASCII and Latin-1 dominate real text; a flat table keeps them off the binary search.
const std::array<uint8_t, 256>& latin1_table() {
  static const std::array<uint8_t, 256> table = [] {
    std::array<uint8_t, 256> t{};
    for (uint32_t cp = 0; cp < 256; ++cp) t[cp] = lookup_value(cp);
    return t;
  }();
  return table;
}

}  // namespace

CodepointInfo codepoint_info(uint32_t cp) {
  const uint8_t value = cp < 256 ? latin1_table()[cp] : lookup_value(cp);
  return {static_cast<Category>(value & 0x7F), (value & kWhitespaceFlag) != 0};
}

Utf8Step scan_utf8(std::string_view text, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte(pos);
  if (lead < 0x80) return {Utf8Status::kComplete, 1, lead};
  int length = 0;
  uint32_t cp = 0;
  uint8_t second_min = 0x80, second_max = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
    cp = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    cp = lead & 0x0F;
    if (lead == 0xE0) second_min = 0xA0;  // overlong
    if (lead == 0xED) second_max = 0x9F;  // surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    cp = lead & 0x07;
    if (lead == 0xF0) second_min = 0x90;  // overlong
    if (lead == 0xF4) second_max = 0x8F;  // past U+10FFFF
  } else {
    return {Utf8Status::kInvalid, 1, 0};  // continuation byte, C0, C1 or F5..FF
  }
  for (int i = 1; i < length; ++i) {
    if (pos + i >= text.size()) return {Utf8Status::kIncomplete, static_cast<uint32_t>(i), 0};
    const uint8_t b = byte(pos + i);
    const uint8_t lo = i == 1 ? second_min : 0x80;
    const uint8_t hi = i == 1 ? second_max : 0xBF;
    if (b < lo || b > hi) return {Utf8Status::kInvalid, static_cast<uint32_t>(i), 0};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {Utf8Status::kComplete, static_cast<uint32_t>(length), cp};
}

Utf8Char decode_utf8(std::string_view text, size_t pos) {
  const Utf8Step step = scan_utf8(text, pos);
  if (step.status != Utf8Status::kComplete) return {static_cast<uint8_t>(text[pos]), 1, false};
  return {step.cp, step.length, true};
}

std::string sanitize_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    const Utf8Step step = scan_utf8(bytes, pos);
    if (step.status == Utf8Status::kComplete) {
      out.append(bytes.substr(pos, step.length));
    } else {
      append_utf8(out, 0xFFFD);
    }
    pos += step.length;
  }
  return out;
}

}  // namespace llamaserve::unicode
