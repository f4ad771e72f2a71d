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

// A request that failed to parse names the field its message starts with, as OpenAI's `param`.
TEST(ApiError, RequestErrorNamesTheField) {
  EXPECT_EQ(request_error(Status(StatusCode::kInvalidArgument, "'max_tokens' must be ...")).param,
            "max_tokens");
  EXPECT_EQ(request_error(Status(StatusCode::kInvalidArgument, "'tokens[0]' is negative")).param,
            "tokens");
  EXPECT_EQ(request_error(Status(StatusCode::kUnsupported, "'n' must be 1")).param, "n");
  EXPECT_EQ(request_error(Status(StatusCode::kInvalidArgument, "'messages[1].content' bad")).param,
            "messages");
  EXPECT_EQ(request_error(Status(StatusCode::kInvalidArgument, "invalid JSON at 3")).param, "");
  EXPECT_EQ(request_error(Status(StatusCode::kUnavailable, "'x' later")).param, "");
  EXPECT_EQ(error_json(request_error(Status(StatusCode::kInvalidArgument, "'")))["error"]["param"],
            nullptr);
}

}  // namespace
}  // namespace llamaserve::server
