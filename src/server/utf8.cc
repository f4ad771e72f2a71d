#include "server/utf8.h"

#include <cstdint>

namespace llamaserve::server {

std::optional<size_t> find_invalid_utf8(std::string_view text) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t lead = bytes[i];
    if (lead < 0x80) {
      ++i;
      continue;
    }
    // Allowed range of the second byte depends on the lead byte (RFC 3629 table 3-7); the
    // narrowed ranges exclude overlong forms, UTF-16 surrogates and code points > U+10FFFF.
    size_t length = 0;
    uint8_t second_min = 0x80, second_max = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead == 0xE0) {
      length = 3, second_min = 0xA0;
    } else if ((lead >= 0xE1 && lead <= 0xEC) || lead == 0xEE || lead == 0xEF) {
      length = 3;
    } else if (lead == 0xED) {
      length = 3, second_max = 0x9F;
    } else if (lead == 0xF0) {
      length = 4, second_min = 0x90;
    } else if (lead >= 0xF1 && lead <= 0xF3) {
      length = 4;
    } else if (lead == 0xF4) {
      length = 4, second_max = 0x8F;
    } else {
      return i;
    }
    if (i + length > n) return i;
    if (bytes[i + 1] < second_min || bytes[i + 1] > second_max) return i;
    for (size_t k = 2; k < length; ++k) {
      if ((bytes[i + k] & 0xC0) != 0x80) return i;
    }
    i += length;
  }
  return std::nullopt;
}

}  // namespace llamaserve::server
