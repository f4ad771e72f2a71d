// UTF-8 encoding of one code point, shared by the tokenizer's byte/text conversions and the
// Jinja lexer's string escapes.
#pragma once

#include <cstdint>
#include <string>

namespace llamaserve::unicode {

// Appends `cp` as 1 to 4 bytes. PRECONDITION: cp <= 0x10FFFF (surrogates are written as
// they are).
void append_utf8(std::string& out, uint32_t cp);

}  // namespace llamaserve::unicode
