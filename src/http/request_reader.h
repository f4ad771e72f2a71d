// The strict, incremental HTTP/1.1 request reader: bytes in as they arrive, one request out,
// every limit enforced while reading (RequestLimits) so that no request costs more memory
// than the limits allow, whatever its framing. The head is handed out before any body byte
// is read, so that the caller can refuse a request (auth, route) without reading its body.
//
// Framing is strict where lenience lets two parties disagree on where a request ends
// (RFC 9112 §6.3): Content-Length together with Transfer-Encoding, a Transfer-Encoding whose
// last coding is not chunked, Transfer-Encoding in HTTP/1.0, differing Content-Length values
// and bad chunk sizes all fail the request, and the connection must then be closed.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "http/limits.h"
#include "http/message.h"

namespace llamaserve::http {

// Why a request was refused: the status to answer with and a message for the client.
struct HttpError {
  int status = 400;
  std::string message;
};

class RequestReader {
 public:
  enum class State {
    kHead,       // reading the request line and fields
    kHeadReady,  // head() is valid; call read_body() or stop
    kBody,       // reading the body
    kComplete,   // take() the request
    kFailed,     // error() says why; the connection cannot be reused
  };

  explicit RequestReader(const RequestLimits& limits);
  ~RequestReader();
  RequestReader(RequestReader&&) noexcept;
  RequestReader& operator=(RequestReader&&) noexcept;

  // Parses from the start of `data` (the bytes not consumed so far plus new ones) and returns
  // how many bytes were consumed. Call again with the unconsumed rest and more bytes. Stops
  // at the end of the head (kHeadReady) and at the end of the request (kComplete): the bytes
  // after it belong to the next request.
  size_t parse(std::string_view data);

  State state() const { return state_; }
  const HttpError& error() const { return error_; }

  // kHeadReady and later: method, target, path, version and headers (no body yet).
  const Request& head() const { return request_; }
  // The client asked for "100 Continue" before sending its body.
  bool expects_continue() const { return expects_continue_; }
  // The request has a body to read (Content-Length > 0 or chunked).
  bool has_body() const;
  // Whether the client allows the connection to stay open after the response.
  bool keep_alive() const;

  // kHeadReady -> kBody (or kComplete when there is no body).
  void read_body();
  // kComplete: the request, body decoded; the reader is ready for the next request.
  Request take();

 private:
  enum class HeadScan { kIncomplete, kComplete, kFailed };
  void fail(int status, std::string message);
  HeadScan scan_head(std::string_view data);
  void finish_head();
  void finish_body();

  RequestLimits limits_;
  struct Parser;
  std::unique_ptr<Parser> parser_;
  State state_ = State::kHead;
  HttpError error_;
  Request request_;
  bool expects_continue_ = false;
  std::string content_encoding_;  // "" = identity
};

}  // namespace llamaserve::http
