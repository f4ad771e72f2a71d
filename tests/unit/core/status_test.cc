#include "core/status.h"

#include <gtest/gtest.h>

namespace llamaserve {
namespace {

Result<int> parse_positive(int x) {
  if (x <= 0)
    return make_error(StatusCode::kInvalidArgument, "expected a positive number, got {}", x);
  return x;
}

Result<int> doubled(int x) {
  LS_ASSIGN_OR_RETURN(int value, parse_positive(x));
  return value * 2;
}

TEST(StatusTest, OkAndError) {
  EXPECT_TRUE(Status::ok().is_ok());
  Status error = make_error(StatusCode::kNotFound, "no key '{}'", "a");
  EXPECT_FALSE(error.is_ok());
  EXPECT_EQ(error.to_string(), "not found: no key 'a'");
  EXPECT_EQ(error.with_context("model.gguf").message(), "model.gguf: no key 'a'");
}

TEST(StatusTest, ResultPropagates) {
  auto good = doubled(4);
  ASSERT_TRUE(good.is_ok());
  EXPECT_EQ(*good, 8);
  auto bad = doubled(-1);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("-1"), std::string::npos);
}

}  // namespace
}  // namespace llamaserve
