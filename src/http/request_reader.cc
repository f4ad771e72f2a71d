#include "http/request_reader.h"

#include <boost/beast/core/error.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>

#include <fmt/format.h>

#include "http/chunked_decoder.h"
#include "http/content_decoding.h"

namespace llamaserve::http {
namespace beast_http = boost::beast::http;

struct RequestReader::Parser {
  explicit Parser(const RequestLimits& limits) : chunked(limits) {}

  // The head only: bodies are framed below, so that no body byte reaches Beast.
  beast_http::request_parser<beast_http::empty_body> beast;
  ChunkedDecoder chunked;
  uint64_t length_left = 0;  // Content-Length framing
  std::string body;
  // Head lines already checked against the limits: bytes, and whether the request line was
  // among them.
  size_t scanned_bytes = 0;
  bool request_line_scanned = false;
  bool head_complete = false;
};

namespace {

// Beast's head parse errors as the status the client gets.
HttpError error_for(const boost::beast::error_code& ec, const RequestLimits& limits) {
  using beast_http::error;
  if (ec == error::header_limit) {
    return {431, fmt::format("the request head is larger than {} bytes", limits.max_header_bytes)};
  }
  if (ec == error::bad_version) return {505, "only HTTP/1.0 and HTTP/1.1 are supported"};
  if (ec == error::bad_content_length || ec == error::multiple_content_length) {
    return {400, "malformed request: invalid or conflicting Content-Length"};
  }
  if (ec == error::bad_transfer_encoding) {
    return {400, "malformed request: Transfer-Encoding repeated or sent with Content-Length"};
  }
  return {400, fmt::format("malformed request: {}", ec.message())};
}

std::string lower_ascii(std::string_view text) {
  std::string lower(text);
  for (char& c : lower) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return lower;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

}  // namespace

RequestReader::RequestReader(const RequestLimits& limits)
    : limits_(limits), parser_(std::make_unique<Parser>(limits)) {
  parser_->beast.header_limit(limits_.max_header_bytes);
  // A declared length is checked against the limit when the body is read: it must not be
  // refused before the caller has checked the head (an unauthenticated client gets 401).
  parser_->beast.body_limit(boost::none);
  parser_->beast.eager(false);  // stop after the head
}

RequestReader::~RequestReader() = default;
RequestReader::RequestReader(RequestReader&&) noexcept = default;
RequestReader& RequestReader::operator=(RequestReader&&) noexcept = default;

void RequestReader::fail(int status, std::string message) {
  state_ = State::kFailed;
  error_ = {status, std::move(message)};
}

// Checks the lines of the head seen so far against the per-line and total limits, resuming
// where the previous call stopped (the caller presents the same unconsumed head again, with
// more bytes). kFailed once a limit is crossed; kComplete once the empty line that ends the
// head has arrived.
RequestReader::HeadScan RequestReader::scan_head(std::string_view data) {
  Parser& p = *parser_;
  while (!p.head_complete && p.scanned_bytes < data.size()) {
    if (p.scanned_bytes >= limits_.max_header_bytes) break;  // over the total: refused below
    const size_t line_end = data.find('\n', p.scanned_bytes);
    const size_t line_bytes =
        (line_end == std::string_view::npos ? data.size() : line_end + 1) - p.scanned_bytes;
    const char first = data[p.scanned_bytes];
    if (p.request_line_scanned && (first == ' ' || first == '\t')) {
      // RFC 9112 §5.2: obsolete line folding is refused rather than joined, so that a field is
      // never longer than the line limit.
      fail(400, "malformed request: folded header lines are not accepted");
      return HeadScan::kFailed;
    }
    if (!p.request_line_scanned && line_bytes > limits_.max_request_line_bytes) {
      fail(414,
           fmt::format("the request line is longer than {} bytes", limits_.max_request_line_bytes));
      return HeadScan::kFailed;
    }
    if (p.request_line_scanned && line_bytes > limits_.max_header_line_bytes) {
      fail(431,
           fmt::format("a header field is longer than {} bytes", limits_.max_header_line_bytes));
      return HeadScan::kFailed;
    }
    if (line_end == std::string_view::npos) break;  // the line is not complete yet
    p.scanned_bytes = line_end + 1;
    // The empty line (CRLF, or a bare LF, which the parser then rejects) ends the head.
    if (p.request_line_scanned && line_bytes <= 2) p.head_complete = true;
    p.request_line_scanned = true;
  }
  const size_t head_bytes = p.head_complete ? p.scanned_bytes : data.size();
  if (head_bytes > limits_.max_header_bytes) {
    fail(431, fmt::format("the request head is larger than {} bytes", limits_.max_header_bytes));
    return HeadScan::kFailed;
  }
  return p.head_complete ? HeadScan::kComplete : HeadScan::kIncomplete;
}

size_t RequestReader::parse(std::string_view data) {
  size_t consumed = 0;
  if (state_ == State::kHead) {
    // RFC 9112 §2.2: empty lines before a request line are ignored.
    if (parser_->scanned_bytes == 0) {
      while (consumed + 1 < data.size() && data[consumed] == '\r' && data[consumed + 1] == '\n') {
        consumed += 2;
      }
      data.remove_prefix(consumed);
      if (data == "\r") return consumed;  // an empty line or a request line: wait and see
    }
    // The parser sees the head only once it is whole, so that how the bytes were split into
    // reads cannot change the outcome.
    switch (scan_head(data)) {
      case HeadScan::kFailed:
      case HeadScan::kIncomplete: return consumed;
      case HeadScan::kComplete: break;
    }
    boost::beast::error_code ec;
    const size_t used =
        parser_->beast.put(boost::asio::const_buffer(data.data(), parser_->scanned_bytes), ec);
    if (ec == beast_http::error::need_more || (!ec && !parser_->beast.is_header_done())) {
      fail(400, "malformed request: the head does not end where its empty line is");
      return consumed;
    }
    if (ec) {
      const HttpError error = error_for(ec, limits_);
      fail(error.status, error.message);
      return consumed + used;
    }
    finish_head();
    return consumed + used;
  }
  if (state_ != State::kBody) return 0;
  Parser& p = *parser_;
  if (p.beast.chunked()) {
    consumed = p.chunked.decode(data, p.body);
    if (p.chunked.state() == ChunkedDecoder::State::kFailed) {
      fail(p.chunked.error_status(), p.chunked.error_message());
    } else if (p.chunked.state() == ChunkedDecoder::State::kDone) {
      finish_body();
    }
    return consumed;
  }
  consumed = static_cast<size_t>(std::min<uint64_t>(p.length_left, data.size()));
  p.body.append(data.substr(0, consumed));
  p.length_left -= consumed;
  if (p.length_left == 0) finish_body();
  return consumed;
}

void RequestReader::finish_head() {
  const auto& message = parser_->beast.get();
  request_.method = std::string(message.method_string());
  request_.target = std::string(message.target());
  request_.path = request_.target.substr(0, request_.target.find('?'));
  request_.version = message.version();
  request_.headers.clear();
  int host_fields = 0;
  bool transfer_encoding = false;
  for (const auto& field : message) {
    request_.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    if (field.name() == beast_http::field::host) ++host_fields;
    if (field.name() == beast_http::field::transfer_encoding) transfer_encoding = true;
  }
  if (request_.version != 10 && request_.version != 11) {
    return fail(505, "only HTTP/1.0 and HTTP/1.1 are supported");
  }
  if (request_.target.empty() || request_.target.front() != '/') {
    if (request_.method != "OPTIONS" || request_.target != "*") {
      return fail(400, "malformed request: the target must be an absolute path");
    }
  }
  // RFC 9112 §3.2: exactly one Host in HTTP/1.1.
  if (host_fields > 1 || (request_.version == 11 && host_fields == 0)) {
    return fail(400, "malformed request: an HTTP/1.1 request needs exactly one Host header");
  }
  // RFC 9112 §6.1: Transfer-Encoding in HTTP/1.0 means faulty framing; a coding other than a
  // final "chunked" leaves the body's end unknown (and is not supported anyway).
  if (transfer_encoding && request_.version == 10) {
    return fail(400, "malformed request: Transfer-Encoding in an HTTP/1.0 request");
  }
  if (transfer_encoding && !parser_->beast.chunked()) {
    return fail(501, "only the chunked transfer coding is supported");
  }
  if (transfer_encoding) {
    const std::string coding = lower_ascii(trim(*request_.header("Transfer-Encoding")));
    if (coding != "chunked") return fail(501, "only the chunked transfer coding is supported");
  }
  if (auto encoding = request_.header("Content-Encoding")) {
    const std::string coding = lower_ascii(trim(*encoding));
    if (coding == "gzip" || coding == "x-gzip" || coding == "deflate") {
      content_encoding_ = coding;
    } else if (coding != "identity" && !coding.empty()) {
      return fail(415, fmt::format("unsupported Content-Encoding '{}'; use gzip, deflate or none",
                                   coding.substr(0, 64)));
    }
  }
  if (auto expect = request_.header("Expect")) {
    if (lower_ascii(trim(*expect)) != "100-continue") {
      return fail(417, "only 'Expect: 100-continue' is supported");
    }
    expects_continue_ = request_.version == 11;
  }
  state_ = State::kHeadReady;
}

bool RequestReader::has_body() const {
  if (parser_->beast.chunked()) return true;
  const auto length = parser_->beast.content_length();
  return length && *length > 0;
}

bool RequestReader::keep_alive() const { return parser_->beast.keep_alive(); }

void RequestReader::read_body() {
  if (state_ != State::kHeadReady) return;
  Parser& p = *parser_;
  const auto length = p.beast.content_length();
  if (length && *length > limits_.max_body_bytes) {
    return fail(413, fmt::format("the request body is larger than this server accepts ({} bytes, "
                                 "--max-body-bytes)",
                                 limits_.max_body_bytes));
  }
  p.length_left = p.beast.chunked() ? 0 : length.value_or(0);
  p.body.reserve(static_cast<size_t>(std::min<uint64_t>(p.length_left, 1 << 20)));
  state_ = State::kBody;
  if (!p.beast.chunked() && p.length_left == 0) finish_body();
}

void RequestReader::finish_body() {
  std::string& body = parser_->body;
  if (!content_encoding_.empty()) {
    auto decoded = decode_content(body, limits_.max_body_bytes);
    if (!decoded) {
      const int status = decoded.status().code() == StatusCode::kOutOfRange ? 413 : 400;
      return fail(status, decoded.status().message());
    }
    body = std::move(decoded).value();
  }
  request_.body = std::move(body);
  state_ = State::kComplete;
}

Request RequestReader::take() {
  Request request = std::move(request_);
  *this = RequestReader(limits_);
  return request;
}

}  // namespace llamaserve::http
