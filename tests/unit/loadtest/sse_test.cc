#include "loadtest/sse.h"

#include <random>

#include <gtest/gtest.h>

namespace llamaserve::loadtest {
namespace {

std::vector<SseEvent> parse_in_pieces(std::string_view text, const std::vector<size_t>& cuts) {
  SseParser parser;
  std::vector<SseEvent> events;
  size_t start = 0;
  for (size_t cut : cuts) {
    EXPECT_TRUE(parser.feed(text.substr(start, cut - start), events).is_ok());
    start = cut;
  }
  EXPECT_TRUE(parser.feed(text.substr(start), events).is_ok());
  return events;
}

// Every line ending, a comment, an event type, a field without a value, two data lines.
constexpr std::string_view kStream =
    "data: {\"a\":1}\r\n\r\n"
    ": a comment\n"
    "event: ping\n"
    "data:first\n"
    "data:  second\n"
    "\n"
    "id: 7\r"
    "data\r"
    "\r"
    "data: [DONE]\n\n"
    "data: unterminated";

void expect_stream_events(const std::vector<SseEvent>& events) {
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].type, "message");
  EXPECT_EQ(events[0].data, "{\"a\":1}");
  EXPECT_EQ(events[1].type, "ping");
  EXPECT_EQ(events[1].data, "first\n second");
  EXPECT_EQ(events[2].data, "");  // "data" without a colon: an empty data line
  EXPECT_EQ(events[3].data, "[DONE]");
}

TEST(SseParser, WholeStream) { expect_stream_events(parse_in_pieces(kStream, {})); }

TEST(SseParser, SplitAtEveryByte) {
  std::vector<size_t> cuts;
  for (size_t i = 1; i < kStream.size(); ++i) cuts.push_back(i);
  expect_stream_events(parse_in_pieces(kStream, cuts));
}

TEST(SseParser, SplitAtEveryPairOfBoundaries) {
  for (size_t a = 1; a < kStream.size(); ++a) {
    for (size_t b = a; b < kStream.size(); b += 7) {
      expect_stream_events(parse_in_pieces(kStream, {a, b}));
    }
  }
}

TEST(SseParser, CrLfSplitBetweenItsBytesIsOneLineEnding) {
  // "\r" ends one chunk, "\n" starts the next: one ending, so one event and no empty one.
  const std::vector<SseEvent> events = parse_in_pieces("data: x\r\n\r\ndata: y\r\n\r\n", {8, 10});
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].data, "x");
  EXPECT_EQ(events[1].data, "y");
}

TEST(SseParser, RandomSplitsOfALongStream) {
  std::string text;
  for (int i = 0; i < 200; ++i) {
    text += "data: {\"choices\":[{\"text\":\"t" + std::to_string(i) + "\"}]}" +
            (i % 3 == 0   ? "\r\n\r\n"
             : i % 3 == 1 ? "\n\n"
                          : "\r\r");
  }
  std::mt19937 rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<size_t> cuts;
    for (size_t at = 0; at < text.size();) {
      at += 1 + rng() % 40;
      if (at < text.size()) cuts.push_back(at);
    }
    const std::vector<SseEvent> events = parse_in_pieces(text, cuts);
    ASSERT_EQ(events.size(), 200u);
    EXPECT_EQ(events[199].data, "{\"choices\":[{\"text\":\"t199\"}]}");
  }
}

TEST(SseParser, OverlongLineIsAnError) {
  SseParser parser;
  std::vector<SseEvent> events;
  const std::string chunk(1 << 20, 'x');
  Status status;
  for (size_t i = 0; i <= SseParser::kMaxLineBytes / chunk.size() && status.is_ok(); ++i) {
    status = parser.feed(chunk, events);
  }
  EXPECT_FALSE(status.is_ok());
}

TEST(ReadStreamChunk, CompletionsChatUsageDoneAndErrors) {
  EXPECT_TRUE(read_stream_chunk("[DONE]").done);
  EXPECT_TRUE(read_stream_chunk(R"({"choices":[{"index":0,"text":"hi"}]})").content);
  EXPECT_FALSE(read_stream_chunk(R"({"choices":[{"index":0,"text":""}]})").content);
  EXPECT_TRUE(read_stream_chunk(R"({"choices":[{"delta":{"content":"hi"}}]})").content);
  EXPECT_FALSE(
      read_stream_chunk(R"({"choices":[{"delta":{"role":"assistant","content":""}}]})").content);
  const StreamChunk usage = read_stream_chunk(
      R"({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":34,"total_tokens":46}})");
  EXPECT_FALSE(usage.content);
  EXPECT_EQ(usage.prompt_tokens, 12);
  EXPECT_EQ(usage.completion_tokens, 34);
  EXPECT_EQ(read_stream_chunk(R"({"choices":[{"text":"a"}],"usage":null})").completion_tokens, -1);
  EXPECT_EQ(read_stream_chunk(R"({"error":{"message":"boom","type":"server_error"}})").error,
            "boom");
  EXPECT_FALSE(read_stream_chunk("not json").error.empty());
  EXPECT_FALSE(read_stream_chunk("[1,2]").error.empty());
}

}  // namespace
}  // namespace llamaserve::loadtest
