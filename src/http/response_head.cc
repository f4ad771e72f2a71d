#include "http/response_head.h"

#include <fmt/format.h>

namespace llamaserve::http {

std::string serialize_head(const Response& response, size_t body_bytes, Framing framing,
                           int request_version, bool close) {
  std::string head =
      fmt::format("HTTP/1.1 {} {}\r\n", response.status, reason_phrase(response.status));
  for (const auto& [name, value] : response.headers) {
    if (iequals(name, "Content-Length") || iequals(name, "Transfer-Encoding") ||
        iequals(name, "Connection")) {
      continue;
    }
    head += name;
    head += ": ";
    head += value;
    head += "\r\n";
  }
  // RFC 9110 §8.6: no Content-Length in 1xx and 204 responses.
  const bool bodiless = response.status < 200 || response.status == 204;
  if (!bodiless) {
    switch (framing) {
      case Framing::kLength: head += fmt::format("Content-Length: {}\r\n", body_bytes); break;
      case Framing::kChunked: head += "Transfer-Encoding: chunked\r\n"; break;
      case Framing::kUntilClose: break;
    }
  }
  if (close) {
    head += "Connection: close\r\n";
  } else if (request_version == 10) {
    head += "Connection: keep-alive\r\n";
  }
  head += "\r\n";
  return head;
}

std::string chunk(std::string_view bytes) {
  if (bytes.empty()) return {};
  std::string framed = fmt::format("{:x}\r\n", bytes.size());
  framed += bytes;
  framed += "\r\n";
  return framed;
}

bool asks_to_close(const Response& response) {
  auto connection = response.header("Connection");
  return connection && iequals(*connection, "close");
}

}  // namespace llamaserve::http
