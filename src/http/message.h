// The HTTP messages the transport hands to a handler and takes back: plain structs, so that
// the layers above never see the I/O library or the parser.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace llamaserve::http {

using Headers = std::vector<std::pair<std::string, std::string>>;

// Case-insensitive name lookup (RFC 9110: field names are case-insensitive).
bool iequals(std::string_view a, std::string_view b);
// The first value of `name`, or nullopt.
std::optional<std::string_view> find_header(const Headers& headers, std::string_view name);

struct Request {
  std::string method;
  std::string target;  // as sent: path and query
  std::string path;    // target up to '?'
  int version = 11;    // 10 = HTTP/1.0, 11 = HTTP/1.1
  Headers headers;     // in order, names as sent
  std::string body;    // de-chunked and decompressed
  std::string remote_address;

  std::optional<std::string_view> header(std::string_view name) const {
    return find_header(headers, name);
  }
};

// HEAD asks for the head GET would answer with: a response to it carries no body (RFC 9110
// 9.3.2), whatever its Content-Length says. The transport leaves the body out.
inline bool is_head_request(std::string_view method) { return method == "HEAD"; }

// The method whose handler answers `method`: GET's for HEAD, else its own.
inline std::string_view answering_method(std::string_view method) {
  return is_head_request(method) ? "GET" : method;
}

struct Response {
  int status = 200;
  Headers headers;  // besides Content-Length / Transfer-Encoding / Connection (the transport's)
  std::string body;

  void set_header(std::string name, std::string value);
  std::optional<std::string_view> header(std::string_view name) const {
    return find_header(headers, name);
  }
};

// %XX escapes of a path segment decoded; a malformed escape is kept as it is.
std::string percent_decode(std::string_view text);

// "OK", "Not Found", ...; "Unknown" for codes without a registered phrase.
std::string_view reason_phrase(int status);

}  // namespace llamaserve::http
