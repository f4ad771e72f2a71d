#include "server/sse.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace llamaserve::server {
namespace {

// A minimal SSE parser following the WHATWG algorithm, to check that what we write reads
// back as the payload we meant.
struct ParsedEvent {
  std::string type;
  std::string data;
};

std::vector<ParsedEvent> parse_sse(const std::string& stream) {
  std::vector<ParsedEvent> events;
  std::string type, data;
  bool has_data = false;
  size_t pos = 0;
  while (pos < stream.size()) {
    size_t end = stream.find_first_of("\r\n", pos);
    if (end == std::string::npos) break;  // incomplete line: not dispatched
    std::string line = stream.substr(pos, end - pos);
    pos = end + 1;
    if (stream[end] == '\r' && pos < stream.size() && stream[pos] == '\n') ++pos;
    if (line.empty()) {
      if (has_data) events.push_back({type.empty() ? "message" : type, data});
      type.clear(), data.clear(), has_data = false;
      continue;
    }
    const size_t colon = line.find(':');
    std::string field = line.substr(0, colon);
    std::string value = colon == std::string::npos ? "" : line.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.erase(0, 1);
    if (field == "event") type = value;
    if (field == "data") {
      if (has_data) data.push_back('\n');
      data += value;
      has_data = true;
    }
  }
  return events;
}

TEST(Sse, SingleLinePayload) {
  EXPECT_EQ(sse_event("token", "Hello"), "event: token\ndata: Hello\n\n");
  EXPECT_EQ(sse_data("{\"a\":1}"), "data: {\"a\":1}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
}

TEST(Sse, MultiLinePayloadBecomesSeveralDataLines) {
  EXPECT_EQ(sse_event("token", "a\nb"), "event: token\ndata: a\ndata: b\n\n");
  EXPECT_EQ(sse_event("token", "\n"), "event: token\ndata: \ndata: \n\n");
  EXPECT_EQ(sse_event("", "x\r\ny\rz"), "data: x\ndata: y\ndata: z\n\n");
}

TEST(Sse, RoundTripsThroughASpecParser) {
  const std::vector<std::string> payloads = {"Hello",
                                             " leading space",
                                             "  two spaces",
                                             "line\n",
                                             "\nstarts with newline",
                                             "a\n\nb",
                                             "trailing\n\n",
                                             "",
                                             ":colon first",
                                             "data: looks like a field",
                                             "\xE2\x82\xAC"};
  std::string stream;
  for (const auto& p : payloads) stream += sse_event("token", p);
  auto events = parse_sse(stream);
  ASSERT_EQ(events.size(), payloads.size());
  for (size_t i = 0; i < payloads.size(); ++i) {
    EXPECT_EQ(events[i].type, "token");
    EXPECT_EQ(events[i].data, payloads[i]) << "payload " << i;
  }
}

TEST(Sse, CarriageReturnsReadBackAsNewlines) {
  auto events = parse_sse(sse_event("", "a\r\nb\rc"));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, "a\nb\nc");
}

}  // namespace
}  // namespace llamaserve::server
