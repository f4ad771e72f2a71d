// RequestReader against hand-written requests: framing, every limit, and the byte-at-a-time
// arrival a slow client produces.
#include "http/request_reader.h"

#include <gtest/gtest.h>

#include <string>

namespace llamaserve::http {
namespace {

struct Outcome {
  RequestReader::State state = RequestReader::State::kHead;
  Request request;   // kComplete
  HttpError error;   // kFailed
  std::string rest;  // bytes after the request
};

// Feeds `bytes` in pieces of `step` bytes (0 = all at once), reading the body whenever the
// head is ready, as the transport does.
Outcome read_request(const std::string& bytes, RequestLimits limits = {}, size_t step = 0) {
  RequestReader reader(limits);
  std::string buffer;
  size_t offset = 0;
  while (true) {
    const size_t take = step == 0 ? bytes.size() - offset : std::min(step, bytes.size() - offset);
    buffer.append(bytes, offset, take);
    offset += take;
    while (true) {
      buffer.erase(0, reader.parse(buffer));
      if (reader.state() == RequestReader::State::kHeadReady) {
        reader.read_body();
        continue;
      }
      break;
    }
    Outcome outcome;
    outcome.state = reader.state();
    if (outcome.state == RequestReader::State::kComplete) {
      outcome.request = reader.take();
      outcome.rest = buffer + bytes.substr(offset);
      return outcome;
    }
    if (outcome.state == RequestReader::State::kFailed) {
      outcome.error = reader.error();
      return outcome;
    }
    if (offset == bytes.size()) {
      outcome.rest = buffer;
      return outcome;
    }
  }
}

TEST(RequestReader, SimpleGetAndPipelinedRest) {
  const auto outcome =
      read_request("GET /v1/models?x=1 HTTP/1.1\r\nHost: a\r\nX-A: b\r\n\r\nGET /health");
  ASSERT_EQ(outcome.state, RequestReader::State::kComplete);
  EXPECT_EQ(outcome.request.method, "GET");
  EXPECT_EQ(outcome.request.target, "/v1/models?x=1");
  EXPECT_EQ(outcome.request.path, "/v1/models");
  EXPECT_EQ(outcome.request.version, 11);
  EXPECT_EQ(outcome.request.header("x-a").value_or(""), "b");
  EXPECT_EQ(outcome.rest, "GET /health");
}

TEST(RequestReader, ContentLengthAndChunkedBodiesOneByteAtATime) {
  const std::string length = "POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhelloNEXT";
  const std::string chunked =
      "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
      "3;ext=1\r\nhel\r\n2\r\nlo\r\n0\r\nTrailer: x\r\n\r\nNEXT";
  for (size_t step : {size_t{0}, size_t{1}, size_t{7}}) {
    for (const std::string& bytes : {length, chunked}) {
      const auto outcome = read_request(bytes, {}, step);
      ASSERT_EQ(outcome.state, RequestReader::State::kComplete) << step << bytes;
      EXPECT_EQ(outcome.request.body, "hello");
      EXPECT_EQ(outcome.rest, "NEXT");
    }
  }
}

TEST(RequestReader, LimitsAnswerWithTheirStatus) {
  RequestLimits limits;
  limits.max_request_line_bytes = 100;
  limits.max_header_line_bytes = 100;
  limits.max_header_bytes = 400;
  limits.max_body_bytes = 50;
  const std::string host = "Host: a\r\n";
  // Each limit is seen before the end of the head arrives.
  EXPECT_EQ(read_request("GET /" + std::string(200, 'a'), limits).error.status, 414);
  EXPECT_EQ(read_request("GET / HTTP/1.1\r\nX: " + std::string(200, 'a'), limits).error.status,
            431);
  std::string many = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 10; ++i)
    many += "X-" + std::to_string(i) + ": " + std::string(60, 'a') + "\r\n";
  EXPECT_EQ(read_request(many, limits).error.status, 431);
  // A declared length over the limit fails at the head; a chunked body when it crosses.
  EXPECT_EQ(read_request("POST / HTTP/1.1\r\n" + host + "Content-Length: 51\r\n\r\n", limits)
                .error.status,
            413);
  std::string chunked = "POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 6; ++i) chunked += "a\r\n" + std::string(10, 'x') + "\r\n";
  EXPECT_EQ(read_request(chunked, limits).error.status, 413);
}

TEST(RequestReader, AmbiguousFramingFails) {
  const std::string start = "POST / HTTP/1.1\r\nHost: a\r\n";
  EXPECT_EQ(
      read_request(start + "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n").error.status,
      400);
  EXPECT_EQ(
      read_request(start + "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n").error.status,
      400);
  EXPECT_EQ(read_request(start + "Content-Length: 3\r\nContent-Length: 4\r\n\r\n").error.status,
            400);
  EXPECT_EQ(read_request(start + "Content-Length: -1\r\n\r\n").error.status, 400);
  EXPECT_EQ(read_request(start + "Transfer-Encoding: gzip\r\n\r\n").error.status, 501);
  EXPECT_EQ(read_request(start + "Transfer-Encoding: chunked, gzip\r\n\r\n").error.status, 501);
  EXPECT_EQ(
      read_request("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n").error.status,
      400);
  EXPECT_EQ(read_request(start + "Transfer-Encoding: chunked\r\n\r\nzz\r\n").error.status, 400);
  EXPECT_EQ(read_request("GET / HTTP/1.1\r\n\r\n").error.status, 400);  // no Host
  EXPECT_EQ(read_request("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n").error.status, 400);
  EXPECT_EQ(read_request("GET / HTTP/2.0\r\nHost: a\r\n\r\n").error.status, 505);
  EXPECT_EQ(read_request("GET http://x/ HTTP/1.1\r\nHost: a\r\n\r\n").error.status, 400);
  EXPECT_EQ(read_request("GET / HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n").error.status, 400);
  EXPECT_EQ(read_request("GET / HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\n\r\n").error.status, 417);
}

TEST(RequestReader, ChunkedFramingIsStrict) {
  const std::string start = "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
  auto status = [&](const std::string& body) { return read_request(start + body).error.status; };
  EXPECT_EQ(status("3\nabc\r\n0\r\n\r\n"), 400);           // bare LF
  EXPECT_EQ(status("3\r\nabcX\r\n0\r\n\r\n"), 400);        // data not followed by CRLF
  EXPECT_EQ(status("11111111111111111\r\n"), 400);         // 17 hex digits
  EXPECT_EQ(status("3 x\r\nabc\r\n0\r\n\r\n"), 400);       // junk after the size
  EXPECT_EQ(status("3;a=\x01\r\nabc\r\n0\r\n\r\n"), 400);  // control character
  EXPECT_EQ(status("0\r\nno colon\r\n\r\n"), 400);         // bad trailer
  EXPECT_EQ(status("0\r\n " + std::string(10, 'x') + ": y\r\n\r\n"), 400);
  EXPECT_EQ(status(std::string(2000, '0') + "\r\n"), 400);  // size line too long
  const auto outcome = read_request(start + "3 ;name=\"v\"\r\nabc\r\n0;x\r\nT: 1\r\n\r\n");
  ASSERT_EQ(outcome.state, RequestReader::State::kComplete) << outcome.error.message;
  EXPECT_EQ(outcome.request.body, "abc");
}

TEST(RequestReader, FoldedHeaderLinesAreRefused) {
  EXPECT_EQ(read_request("GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n 2\r\n\r\n").error.status, 400);
  EXPECT_EQ(read_request("GET / HTTP/1.1\r\n\tHost: a\r\n\r\n").error.status, 400);
}

TEST(RequestReader, Http10AndKeepAlive) {
  RequestReader reader({});
  reader.parse("GET /a HTTP/1.0\r\n\r\n");
  ASSERT_EQ(reader.state(), RequestReader::State::kHeadReady);
  EXPECT_EQ(reader.head().version, 10);
  EXPECT_FALSE(reader.keep_alive());
  RequestReader persistent({});
  persistent.parse("GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  EXPECT_TRUE(persistent.keep_alive());
  RequestReader closing({});
  closing.parse("GET /a HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
  EXPECT_FALSE(closing.keep_alive());
}

TEST(RequestReader, HeadIsReadyBeforeTheBody) {
  RequestReader reader({});
  const std::string head =
      "POST /a HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n";
  EXPECT_EQ(reader.parse(head + "bo"), head.size());
  ASSERT_EQ(reader.state(), RequestReader::State::kHeadReady);
  EXPECT_TRUE(reader.expects_continue());
  EXPECT_TRUE(reader.has_body());
  reader.read_body();
  EXPECT_EQ(reader.parse("bo"), 2u);
  EXPECT_EQ(reader.state(), RequestReader::State::kBody);
  EXPECT_EQ(reader.parse("dy"), 2u);
  ASSERT_EQ(reader.state(), RequestReader::State::kComplete);
  EXPECT_EQ(reader.take().body, "body");
  EXPECT_EQ(reader.state(), RequestReader::State::kHead);  // ready for the next request
}

TEST(RequestReader, EmptyLinesBeforeARequestAreSkipped) {
  const auto outcome = read_request("\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n");
  EXPECT_EQ(outcome.state, RequestReader::State::kComplete);
}

TEST(RequestReader, UnknownContentEncodingIs415) {
  EXPECT_EQ(read_request("POST / HTTP/1.1\r\nHost: a\r\nContent-Encoding: br\r\nContent-Length: "
                         "1\r\n\r\nx")
                .error.status,
            415);
}

}  // namespace
}  // namespace llamaserve::http
