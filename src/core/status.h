// Status and Result<T>: the error currency of every layer below the server.
// Parsers of untrusted data return these instead of throwing, with a message that says
// what was expected, what was found and where.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace llamaserve {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // the caller's input is malformed
  kNotFound,           // a file, key or tensor that must exist does not
  kOutOfRange,         // a value is past a limit (context, sizes, counts)
  kUnsupported,        // well-formed, but not something this build can handle
  kResourceExhausted,  // memory, KV blocks, queue slots
  kUnavailable,        // draining, shutting down, not ready
  kCancelled,
  kDeadlineExceeded,
  kInternal,  // a bug or an unexpected system failure
  kIo,        // the operating system refused a file operation
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }

  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid argument: message", or "ok".
  std::string to_string() const;

  // Prefixes the message with context ("loading model.gguf: ...").
  Status with_context(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

template <typename... Args>
Status make_error(StatusCode code, fmt::format_string<Args...> format, Args&&... args) {
  return Status(code, fmt::format(format, std::forward<Args>(args)...));
}

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : storage_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : storage_(std::move(status)) {  // NOLINT: implicit by design
    assert(!std::get<Status>(storage_).is_ok() && "Result built from an ok Status");
  }

  bool is_ok() const { return std::holds_alternative<T>(storage_); }
  explicit operator bool() const { return is_ok(); }

  const Status& status() const {
    static const Status kOk;
    return is_ok() ? kOk : std::get<Status>(storage_);
  }
  T& value() & { return std::get<T>(storage_); }
  const T& value() const& { return std::get<T>(storage_); }
  T&& value() && { return std::get<T>(std::move(storage_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> storage_;
};

}  // namespace llamaserve

// Early-return helpers. LS_ASSIGN_OR_RETURN(auto x, expr) declares x from a Result.
#define LS_RETURN_IF_ERROR(expr)                \
  do {                                          \
    ::llamaserve::Status ls_status_ = (expr);   \
    if (!ls_status_.is_ok()) return ls_status_; \
  } while (0)

#define LS_CONCAT_INNER(a, b) a##b
#define LS_CONCAT(a, b) LS_CONCAT_INNER(a, b)
#define LS_ASSIGN_OR_RETURN(lhs, expr) \
  LS_ASSIGN_OR_RETURN_IMPL(LS_CONCAT(ls_result_, __LINE__), lhs, expr)
#define LS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.is_ok()) return tmp.status();         \
  lhs = std::move(tmp).value()
