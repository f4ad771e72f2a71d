// The chunked transfer coding of a request body (RFC 9112 §7.1), decoded incrementally under
// a limit on the decoded size, on each chunk-size line and on the trailer section. Chunk
// extensions and trailer fields are checked for form and dropped.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "http/limits.h"

namespace llamaserve::http {

class ChunkedDecoder {
 public:
  enum class State { kReading, kDone, kFailed };

  explicit ChunkedDecoder(const RequestLimits& limits) : limits_(limits) {}

  // Decodes from the start of `data` (the bytes not consumed so far plus new ones), appending
  // chunk data to `body`; returns how many bytes were consumed. A line is consumed only once
  // it is complete, so the result does not depend on how the input is split.
  size_t decode(std::string_view data, std::string& body);

  State state() const { return state_; }
  // kFailed: 413 for a body over the limit, else 400.
  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_message_; }

 private:
  enum class Part { kSizeLine, kData, kDataEnd, kTrailer };
  // A complete line at the start of `data` (without its CRLF), or false when more is needed
  // or the line is too long or malformed (then kFailed).
  bool take_line(std::string_view data, size_t limit, std::string_view& line, size_t& used);
  bool parse_size_line(std::string_view line);
  void fail(int status, std::string message);

  RequestLimits limits_;
  State state_ = State::kReading;
  Part part_ = Part::kSizeLine;
  uint64_t chunk_left_ = 0;
  uint64_t trailer_bytes_ = 0;
  int error_status_ = 0;
  std::string error_message_;
};

}  // namespace llamaserve::http
