#include "server/request_trace.h"

#include <string>

#include <gtest/gtest.h>

namespace llamaserve::server {
namespace {

TEST(AcceptedRequestId, KeepsUsableIdsOnly) {
  EXPECT_EQ(accepted_request_id("order-42"), "order-42");
  EXPECT_EQ(accepted_request_id("a.b_c~d:e/f+g=h@i-J9"), "a.b_c~d:e/f+g=h@i-J9");
  EXPECT_EQ(accepted_request_id(std::string(128, 'x')), std::string(128, 'x'));
  EXPECT_EQ(accepted_request_id(std::string(129, 'x')), "");
  EXPECT_EQ(accepted_request_id(""), "");
  EXPECT_EQ(accepted_request_id("two words"), "");
  EXPECT_EQ(accepted_request_id("line\nbreak"), "");
  EXPECT_EQ(accepted_request_id("quote\""), "");
  EXPECT_EQ(accepted_request_id("caf\xc3\xa9"), "");
}

constexpr std::string_view kValid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

TEST(ParseTraceparent, ValidVersionZero) {
  const TraceParent parent = parse_traceparent(kValid);
  EXPECT_EQ(parent.header, kValid);
  EXPECT_EQ(parent.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(parent.parent_id, "00f067aa0ba902b7");
}

TEST(ParseTraceparent, RejectsMalformedValues) {
  const auto rejected = [](std::string value) { return parse_traceparent(value).header.empty(); };
  std::string value(kValid);
  EXPECT_TRUE(rejected(value.substr(0, 54)));     // one digit short
  EXPECT_TRUE(rejected(value + "-extra"));        // version 00 has four fields
  EXPECT_TRUE(rejected("ff" + value.substr(2)));  // version ff is invalid
  EXPECT_TRUE(rejected(value.substr(0, 3) + std::string(32, '0') + value.substr(35)));
  EXPECT_TRUE(rejected(value.substr(0, 36) + std::string(16, '0') + value.substr(52)));
  std::string upper = value;
  upper[3] = 'B';  // upper-case hex is not allowed
  EXPECT_TRUE(rejected(upper));
  std::string dash = value;
  dash[2] = '_';
  EXPECT_TRUE(rejected(dash));
  EXPECT_TRUE(rejected(""));
}

TEST(ParseTraceparent, LaterVersionsMayAddFields) {
  const std::string later = "01" + std::string(kValid.substr(2)) + "-what-comes-next";
  EXPECT_EQ(parse_traceparent(later).trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_TRUE(parse_traceparent("01" + std::string(kValid.substr(2)) + "x").header.empty());
}

}  // namespace
}  // namespace llamaserve::server
