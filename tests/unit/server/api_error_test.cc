#include "server/api_error.h"

#include <gtest/gtest.h>

namespace llamaserve::server {
namespace {

TEST(ApiError, OpenAiShape) {
  auto body = nlohmann::json::parse(error_body(invalid_request("bad 'x'", "invalid_value", "x")));
  ASSERT_TRUE(body.contains("error"));
  EXPECT_EQ(body["error"]["message"], "bad 'x'");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(body["error"]["code"], "invalid_value");
  EXPECT_EQ(body["error"]["param"], "x");
  auto no_param = nlohmann::json::parse(error_body(unauthorized("no key")));
  EXPECT_TRUE(no_param["error"]["param"].is_null());
}

TEST(ApiError, InvalidUtf8InMessageDoesNotThrow) {
  std::string body;
  ASSERT_NO_THROW(body = error_body(internal_error("bad \xFF byte")));
  EXPECT_TRUE(nlohmann::json::accept(body));
}

TEST(ApiError, StatusMapping) {
  EXPECT_EQ(api_error_from_status(Status(StatusCode::kInvalidArgument, "x")).http_status, 400);
  EXPECT_EQ(api_error_from_status(Status(StatusCode::kOutOfRange, "x")).http_status, 400);
  EXPECT_EQ(api_error_from_status(Status(StatusCode::kUnsupported, "x")).http_status, 400);
  EXPECT_EQ(api_error_from_status(Status(StatusCode::kNotFound, "x")).http_status, 404);
  auto exhausted = api_error_from_status(Status(StatusCode::kResourceExhausted, "x"));
  EXPECT_EQ(exhausted.http_status, 429);
  EXPECT_GT(exhausted.retry_after_s, 0);
  EXPECT_EQ(api_error_from_status(Status(StatusCode::kUnavailable, "x")).http_status, 503);
  EXPECT_EQ(api_error_from_status(Status(StatusCode::kDeadlineExceeded, "x")).http_status, 408);
  EXPECT_EQ(api_error_from_status(Status(StatusCode::kInternal, "x")).http_status, 500);
  EXPECT_EQ(api_error_from_status(Status(StatusCode::kIo, "x")).http_status, 500);
}

}  // namespace
}  // namespace llamaserve::server
