// Template text → tokens, with jinja2's whitespace rules: `-` after an opening or before a
// closing delimiter strips all whitespace on that side; trim_blocks drops the first newline
// after a block or comment tag; lstrip_blocks drops spaces and tabs before a block or comment
// tag that starts a line. Newlines of the source are normalised to \n and one trailing newline
// is dropped (keep_trailing_newline=False), as jinja2 does.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace llamaserve::jinja {

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

enum class TokenType {
  kText,        // template text outside tags (value: the text)
  kPrintBegin,  // {{
  kPrintEnd,    // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // value: the unescaped string
  kInteger,
  kFloat,
  kOperator,  // value: "+", "//", "==", "(", ...
  kEnd,       // end of the template
};

struct Token {
  TokenType type;
  std::string value;
  int line;
};

// Throws JinjaError (kSyntax) for an unterminated tag, comment or string, or a character that
// starts no token.
std::vector<Token> tokenize(std::string_view source, const LexerOptions& options);

}  // namespace llamaserve::jinja
