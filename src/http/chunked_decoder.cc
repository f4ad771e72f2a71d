#include "http/chunked_decoder.h"

#include <fmt/format.h>

namespace llamaserve::http {
namespace {

// Longest chunk-size line accepted: 16 hex digits and room for modest extensions.
constexpr size_t kMaxSizeLineBytes = 1024;

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Visible ASCII, space, tab and obs-text: what extensions and field lines may contain.
bool is_field_text(std::string_view text) {
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 && byte != '\t') return false;
    if (byte == 0x7f) return false;
  }
  return true;
}

}  // namespace

void ChunkedDecoder::fail(int status, std::string message) {
  state_ = State::kFailed;
  error_status_ = status;
  error_message_ = std::move(message);
}

bool ChunkedDecoder::take_line(std::string_view data, size_t limit, std::string_view& line,
                               size_t& used) {
  const size_t end = data.find('\n');
  if (end == std::string_view::npos) {
    if (data.size() > limit) fail(400, "malformed chunked body: a line is too long");
    return false;
  }
  if (end + 1 > limit) {
    fail(400, "malformed chunked body: a line is too long");
    return false;
  }
  if (end == 0 || data[end - 1] != '\r') {
    fail(400, "malformed chunked body: a line does not end in CRLF");
    return false;
  }
  line = data.substr(0, end - 1);
  used = end + 1;
  return true;
}

bool ChunkedDecoder::parse_size_line(std::string_view line) {
  size_t digits = 0;
  uint64_t size = 0;
  while (digits < line.size() && hex_value(line[digits]) >= 0) {
    if (digits == 16) {
      fail(400, "malformed chunked body: a chunk size has more than 16 hex digits");
      return false;
    }
    size = size * 16 + static_cast<uint64_t>(hex_value(line[digits]));
    ++digits;
  }
  if (digits == 0) {
    fail(400, "malformed chunked body: a chunk does not start with its size in hex");
    return false;
  }
  std::string_view rest = line.substr(digits);
  while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
  if (!rest.empty() && (rest.front() != ';' || !is_field_text(rest))) {
    fail(400, "malformed chunked body: invalid chunk extension");
    return false;
  }
  chunk_left_ = size;
  return true;
}

size_t ChunkedDecoder::decode(std::string_view data, std::string& body) {
  size_t consumed = 0;
  while (state_ == State::kReading && consumed < data.size()) {
    const std::string_view rest = data.substr(consumed);
    std::string_view line;
    size_t used = 0;
    switch (part_) {
      case Part::kSizeLine: {
        if (!take_line(rest, kMaxSizeLineBytes, line, used)) return consumed;
        if (!parse_size_line(line)) return consumed;
        consumed += used;
        if (chunk_left_ > limits_.max_body_bytes - body.size()) {
          fail(413, fmt::format("the request body is larger than this server accepts ({} bytes, "
                                "--max-body-bytes)",
                                limits_.max_body_bytes));
          return consumed;
        }
        part_ = chunk_left_ == 0 ? Part::kTrailer : Part::kData;
        break;
      }
      case Part::kData: {
        const size_t take = static_cast<size_t>(std::min<uint64_t>(chunk_left_, rest.size()));
        body.append(rest.substr(0, take));
        chunk_left_ -= take;
        consumed += take;
        if (chunk_left_ == 0) part_ = Part::kDataEnd;
        break;
      }
      case Part::kDataEnd: {
        if (rest.size() < 2) return consumed;
        if (rest.substr(0, 2) != "\r\n") {
          fail(400, "malformed chunked body: chunk data is not followed by CRLF");
          return consumed;
        }
        consumed += 2;
        part_ = Part::kSizeLine;
        break;
      }
      case Part::kTrailer: {
        if (!take_line(rest, limits_.max_header_line_bytes, line, used)) return consumed;
        trailer_bytes_ += used;
        if (trailer_bytes_ > limits_.max_header_bytes) {
          fail(431, fmt::format("the trailer section is larger than {} bytes",
                                limits_.max_header_bytes));
          return consumed;
        }
        consumed += used;
        if (line.empty()) {
          state_ = State::kDone;
        } else if (line.find(':') == std::string_view::npos || line.front() == ' ' ||
                   line.front() == '\t' || !is_field_text(line)) {
          fail(400, "malformed chunked body: invalid trailer field");
        }
        break;
      }
    }
  }
  return consumed;
}

}  // namespace llamaserve::http
