#include "jinja/lexer.h"

#include <cstdint>

#include "core/utf8.h"
#include "jinja/errors.h"

namespace llamaserve::jinja {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python's "unicode-escape" decoding of a string literal's body, as jinja2 applies it;
// unknown escapes stay as written.
std::string unescape(std::string_view body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c != '\\' || i + 1 == body.size()) {
      out.push_back(c);
      continue;
    }
    const char e = body[++i];
    switch (e) {
      case '\n': break;
      case '\\': out.push_back('\\'); break;
      case '\'': out.push_back('\''); break;
      case '"': out.push_back('"'); break;
      case 'a': out.push_back('\a'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'n': out.push_back('\n'); break;
      case 'r': out.push_back('\r'); break;
      case 't': out.push_back('\t'); break;
      case 'v': out.push_back('\v'); break;
      case 'x':
      case 'u':
      case 'U': {
        const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        uint32_t cp = 0;
        for (size_t k = 0; k < n; ++k) {
          const int h = i + 1 + k < body.size() ? hex_value(body[i + 1 + k]) : -1;
          if (h < 0) fail(ErrorKind::kSyntax, line, "truncated \\{} escape in a string", e);
          cp = cp * 16 + static_cast<uint32_t>(h);
        }
        if (cp > 0x10FFFF) fail(ErrorKind::kSyntax, line, "\\{} escape out of range", e);
        unicode::append_utf8(out, cp);
        i += n;
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++k) {
            cp = cp * 8 + static_cast<uint32_t>(body[++i] - '0');
          }
          unicode::append_utf8(out, cp);
        } else {
          out.push_back('\\');
          out.push_back(e);
        }
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(std::string source, const LexerOptions& options)
      : src_(std::move(source)), options_(options) {}

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      const size_t tag = find_tag(pos_);
      std::string text = src_.substr(pos_, tag - pos_);
      const int text_line = line_;
      count_lines(pos_, tag);
      pos_ = tag;
      if (tag < src_.size()) {
        const char kind = src_[tag + 1];
        const char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
        if (sign == '-') {
          text.erase(text.find_last_not_of(" \t\n\r\f\v") + 1);
        } else if (!(sign == '+' && kind != '{') && options_.lstrip_blocks && kind != '{') {
          const size_t line_begin = text.rfind('\n');
          const size_t l_pos = line_begin == std::string::npos ? 0 : line_begin + 1;
          if ((l_pos > 0 || line_starting) && l_pos < text.size() &&
              text.find_first_not_of(" \t\r\f\v", l_pos) == std::string::npos) {
            text.erase(l_pos);
          }
        }
      }
      if (!text.empty()) tokens_.push_back({TokenType::kText, std::move(text), text_line});
      if (tag >= src_.size()) break;
      line_starting = lex_tag();
    }
    tokens_.push_back({TokenType::kEnd, "", line_});
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return src_.size();
  }

  void count_lines(size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) line_ += src_[i] == '\n';
  }

  // Consumes whitespace after a closing delimiter: all of it after `-`, one newline with
  // trim_blocks for block and comment tags (not after `+`). Returns whether what was consumed
  // ends a line, for lstrip_blocks.
  bool after_close(char sign, bool block_or_comment) {
    const size_t begin = pos_;
    if (sign == '-') {
      while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
    } else if (sign != '+' && block_or_comment && options_.trim_blocks && pos_ < src_.size() &&
               src_[pos_] == '\n') {
      ++pos_;
    }
    count_lines(begin, pos_);
    return pos_ > begin && src_[pos_ - 1] == '\n';
  }

  bool lex_tag() {
    const char kind = src_[pos_ + 1];
    const int start_line = line_;
    pos_ += 2;
    if (pos_ < src_.size() && (src_[pos_] == '-' || (src_[pos_] == '+' && kind != '{'))) ++pos_;
    if (kind == '#') {
      const size_t end = src_.find("#}", pos_);
      if (end == std::string::npos)
        fail(ErrorKind::kSyntax, start_line, "missing end of comment tag");
      const char sign =
          end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : '\0';
      count_lines(pos_, end + 2);
      pos_ = end + 2;
      return after_close(sign, true);
    }
    const bool block = kind == '%';
    tokens_.push_back({block ? TokenType::kBlockBegin : TokenType::kPrintBegin, "", start_line});
    const char close = block ? '%' : '}';
    int balance = 0;
    while (true) {
      while (pos_ < src_.size() && is_space(src_[pos_])) {
        line_ += src_[pos_] == '\n';
        ++pos_;
      }
      if (pos_ >= src_.size()) {
        fail(ErrorKind::kSyntax, start_line,
             "unexpected end of template: the tag opened here "
             "is not closed");
      }
      if (balance == 0) {
        char sign = '\0';
        size_t at = pos_;
        if ((src_[at] == '-' || (src_[at] == '+' && block)) && at + 1 < src_.size()) {
          sign = src_[at];
          ++at;
        }
        if (at + 1 < src_.size() && src_[at] == close && src_[at + 1] == '}') {
          tokens_.push_back({block ? TokenType::kBlockEnd : TokenType::kPrintEnd, "", line_});
          pos_ = at + 2;
          return after_close(sign, block);
        }
      }
      lex_token(balance);
    }
  }

  void lex_token(int& balance) {
    const char c = src_[pos_];
    if (c == '\'' || c == '"') {
      size_t i = pos_ + 1;
      while (i < src_.size() && src_[i] != c) i += src_[i] == '\\' ? 2 : 1;
      if (i >= src_.size()) fail(ErrorKind::kSyntax, line_, "unterminated string");
      const int line = line_;
      count_lines(pos_, i);
      tokens_.push_back({TokenType::kString,
                         unescape(std::string_view(src_).substr(pos_ + 1, i - pos_ - 1), line),
                         line});
      pos_ = i + 1;
      return;
    }
    if (is_digit(c)) return lex_number();
    if (is_name_start(c)) {
      size_t i = pos_;
      while (i < src_.size() && is_name_char(src_[i])) ++i;
      tokens_.push_back({TokenType::kName, src_.substr(pos_, i - pos_), line_});
      pos_ = i;
      return;
    }
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
    for (const std::string_view op : kTwo) {
      if (std::string_view(src_).substr(pos_, 2) == op) {
        tokens_.push_back({TokenType::kOperator, std::string(op), line_});
        pos_ += 2;
        return;
      }
    }
    static constexpr std::string_view kOne = "+-/*%~[](){}<>=.:|,;";
    if (kOne.find(c) == std::string_view::npos) {
      fail(ErrorKind::kSyntax, line_, "unexpected character '{}'",
           static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f
               ? fmt::format("\\x{:02x}", static_cast<unsigned char>(c))
               : std::string(1, c));
    }
    if (c == '(' || c == '[' || c == '{') ++balance;
    if (c == ')' || c == ']' || c == '}') {
      if (balance == 0) fail(ErrorKind::kSyntax, line_, "unexpected '{}'", c);
      --balance;
    }
    tokens_.push_back({TokenType::kOperator, std::string(1, c), line_});
    ++pos_;
  }

  // Digits with optional '_' separators, a fraction and an exponent, as jinja2 reads them.
  void lex_number() {
    size_t i = pos_;
    auto digits = [&] {
      while (i < src_.size() && (is_digit(src_[i]) || (src_[i] == '_' && i + 1 < src_.size() &&
                                                       is_digit(src_[i + 1])))) {
        ++i;
      }
    };
    digits();
    bool is_float = false;
    if (i + 1 < src_.size() && src_[i] == '.' && is_digit(src_[i + 1])) {
      is_float = true;
      ++i;
      digits();
    }
    if (i < src_.size() && (src_[i] == 'e' || src_[i] == 'E')) {
      size_t j = i + 1;
      if (j < src_.size() && (src_[j] == '+' || src_[j] == '-')) ++j;
      if (j < src_.size() && is_digit(src_[j])) {
        is_float = true;
        i = j;
        digits();
      }
    }
    std::string text;
    for (size_t k = pos_; k < i; ++k) {
      if (src_[k] != '_') text.push_back(src_[k]);
    }
    tokens_.push_back({is_float ? TokenType::kFloat : TokenType::kInteger, text, line_});
    pos_ = i;
  }

  std::string src_;
  LexerOptions options_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexerOptions& options) {
  return Lexer(normalize_newlines(source), options).run();
}

}  // namespace llamaserve::jinja
