#include "http/content_decoding.h"

#include <zlib.h>

#include <gtest/gtest.h>

#include <string>

#include "http/request_reader.h"

namespace llamaserve::http {
namespace {

// `window_bits` 15 + 16: gzip; 15: zlib ("deflate" in HTTP).
std::string compress(const std::string& text, int window_bits) {
  z_stream stream{};
  EXPECT_EQ(deflateInit2(&stream, 9, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&stream, text.size()), '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  stream.avail_in = static_cast<uInt>(text.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&stream, Z_FINISH), Z_STREAM_END);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

TEST(ContentDecoding, GzipAndDeflateRoundTrip) {
  const std::string text = R"({"prompt":"hello","max_tokens":3})";
  for (int bits : {15 + 16, 15}) {
    auto decoded = decode_content(compress(text, bits), 1 << 20);
    ASSERT_TRUE(decoded) << decoded.status().to_string();
    EXPECT_EQ(*decoded, text);
  }
}

TEST(ContentDecoding, StopsAtTheLimit) {
  const std::string bomb = compress(std::string(8 << 20, '\0'), 15 + 16);
  ASSERT_LT(bomb.size(), 64u << 10);
  auto decoded = decode_content(bomb, 1 << 20);
  ASSERT_FALSE(decoded);
  EXPECT_EQ(decoded.status().code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(decode_content(bomb, 8 << 20));  // exactly the limit is fine
}

TEST(ContentDecoding, CorruptTruncatedAndTrailingBytesFail) {
  const std::string packed = compress(std::string(1000, 'a'), 15 + 16);
  EXPECT_EQ(decode_content(packed.substr(0, packed.size() / 2), 1 << 20).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(decode_content(packed + "x", 1 << 20).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(decode_content("not compressed at all", 1 << 20).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(decode_content("", 1 << 20).status().code(), StatusCode::kInvalidArgument);
}

TEST(ContentDecoding, TheReaderInflatesUnderTheBodyLimit) {
  RequestLimits limits;
  limits.max_body_bytes = 4096;
  const std::string small = compress("{\"a\":1}", 15 + 16);
  const std::string big = compress(std::string(1 << 20, ' '), 15 + 16);
  for (const auto& [body, status] : {std::pair{small, 0}, std::pair{big, 413}}) {
    RequestReader reader(limits);
    const std::string request =
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Encoding: gzip\r\n"
        "Content-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    const size_t used = reader.parse(request);
    reader.read_body();
    reader.parse(std::string_view(request).substr(used));
    if (status == 0) {
      ASSERT_EQ(reader.state(), RequestReader::State::kComplete);
      EXPECT_EQ(reader.take().body, "{\"a\":1}");
    } else {
      ASSERT_EQ(reader.state(), RequestReader::State::kFailed);
      EXPECT_EQ(reader.error().status, status);
    }
  }
}

}  // namespace
}  // namespace llamaserve::http
