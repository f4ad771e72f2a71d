// The one error type of the Jinja engine. Lexer, parser, evaluator and builtins throw it;
// Template (template.h) catches it at the API boundary and returns a Status, so nothing
// outside src/jinja/ ever sees an exception from here.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace llamaserve::jinja {

enum class ErrorKind {
  kSyntax,   // the template text does not parse
  kRuntime,  // a type error, an undefined value used where jinja2 fails, a bad argument
  kRaised,   // the template called raise_exception(message)
  kLimit,    // a render limit was reached (output bytes, steps, depth)
};

const char* error_kind_name(ErrorKind kind);

class JinjaError : public std::runtime_error {
 public:
  // line 0: not known yet; the evaluator fills it in from the node being evaluated.
  JinjaError(ErrorKind kind, std::string message, int line = 0)
      : std::runtime_error(message), kind_(kind), message_(std::move(message)), line_(line) {}

  ErrorKind kind() const { return kind_; }
  const std::string& message() const { return message_; }
  int line() const { return line_; }
  void set_line_if_unknown(int line) {
    if (line_ == 0) line_ = line;
  }

 private:
  ErrorKind kind_;
  std::string message_;
  int line_;
};

template <typename... Args>
[[noreturn]] void fail(ErrorKind kind, int line, fmt::format_string<Args...> format,
                       Args&&... args) {
  throw JinjaError(kind, fmt::format(format, std::forward<Args>(args)...), line);
}

template <typename... Args>
[[noreturn]] void runtime_error(fmt::format_string<Args...> format, Args&&... args) {
  throw JinjaError(ErrorKind::kRuntime, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace llamaserve::jinja
