#include "http/response_head.h"

#include <gtest/gtest.h>

namespace llamaserve::http {
namespace {

TEST(ResponseHead, FramingAndPersistenceAreTheTransports) {
  Response response;
  response.status = 404;
  response.set_header("Content-Type", "application/json");
  response.set_header("Content-Length", "999");  // ignored
  response.set_header("Connection", "close");    // ignored here; asks_to_close reads it
  EXPECT_TRUE(asks_to_close(response));
  EXPECT_EQ(
      serialize_head(response, 12, Framing::kLength, 11, false),
      "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n");
  EXPECT_EQ(serialize_head(response, 0, Framing::kChunked, 11, true),
            "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(
      serialize_head(response, 0, Framing::kUntilClose, 10, true),
      "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(serialize_head(response, 3, Framing::kLength, 10, false),
            "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 3\r\n"
            "Connection: keep-alive\r\n\r\n");
  Response empty;
  empty.status = 204;
  EXPECT_EQ(serialize_head(empty, 0, Framing::kLength, 11, false),
            "HTTP/1.1 204 No Content\r\n\r\n");
}

TEST(ResponseHead, Chunks) {
  EXPECT_EQ(chunk(""), "");
  EXPECT_EQ(chunk("hello"), "5\r\nhello\r\n");
  EXPECT_EQ(chunk(std::string(26, 'x')), "1a\r\n" + std::string(26, 'x') + "\r\n");
}

}  // namespace
}  // namespace llamaserve::http
