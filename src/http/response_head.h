// Serialising responses: the status line and fields, and the framing of a body (RFC 9112).
#pragma once

#include <string>
#include <string_view>

#include "http/message.h"

namespace llamaserve::http {

enum class Framing {
  kLength,      // Content-Length: a whole body
  kChunked,     // Transfer-Encoding: chunked (HTTP/1.1 streams)
  kUntilClose,  // the body ends when the connection closes (HTTP/1.0 streams)
};

// The head of `response`: status line, its fields (a Content-Length, Transfer-Encoding or
// Connection field of the response's own is ignored: framing and persistence are the
// transport's), the framing field, and "Connection: close" when `close`, or
// "Connection: keep-alive" for an HTTP/1.0 client that keeps the connection.
std::string serialize_head(const Response& response, size_t body_bytes, Framing framing,
                           int request_version, bool close);

// One chunk of a chunked body; empty input gives nothing (an empty chunk would end the body).
std::string chunk(std::string_view bytes);
inline constexpr std::string_view kLastChunk = "0\r\n\r\n";

// Whether the response asks for its connection to close ("Connection: close").
bool asks_to_close(const Response& response);

}  // namespace llamaserve::http
