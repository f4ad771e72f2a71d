#include "server/sse.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sse_parser.h"

namespace llamaserve::server {
namespace {

using test_util::parse_sse;

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
