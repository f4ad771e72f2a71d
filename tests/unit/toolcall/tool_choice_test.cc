#include "toolcall/tool_choice.h"

#include <gtest/gtest.h>

namespace llamaserve::toolcall {
namespace {

using nlohmann::ordered_json;

const ordered_json kTools = ordered_json::parse(R"([
  {"type": "function", "function": {"name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}},
  {"type": "function", "function": {"name": "now"}}
])");

TEST(ForcedCallSchema, NamedFunctionIsItsParameters) {
  const ToolChoice choice{ToolChoice::Kind::kFunction, "get_weather"};
  EXPECT_EQ(forced_call_schema(kTools, choice, true), kTools[0]["function"]["parameters"]);
  const ToolChoice no_parameters{ToolChoice::Kind::kFunction, "now"};
  EXPECT_EQ(forced_call_schema(kTools, no_parameters, true), ordered_json({{"type", "object"}}));
}

TEST(ForcedCallSchema, RequiredIsAnyOfTheCalls) {
  const ToolChoice choice{ToolChoice::Kind::kRequired, ""};
  const ordered_json one = forced_call_schema(kTools, choice, /*parallel_calls=*/false);
  ASSERT_TRUE(one.contains("anyOf"));
  ASSERT_EQ(one["anyOf"].size(), 2u);
  EXPECT_EQ(one["anyOf"][0]["properties"]["name"]["const"], "get_weather");
  EXPECT_EQ(one["anyOf"][0]["properties"]["arguments"], kTools[0]["function"]["parameters"]);
  EXPECT_EQ(one["anyOf"][0]["additionalProperties"], false);
  EXPECT_EQ(one["anyOf"][1]["properties"]["arguments"], ordered_json({{"type", "object"}}));
  const ordered_json many = forced_call_schema(kTools, choice, /*parallel_calls=*/true);
  EXPECT_EQ(many["type"], "array");
  EXPECT_EQ(many["minItems"], 1);
  EXPECT_EQ(many["items"], one);
}

TEST(ParseForcedOutput, NamedAndRequired) {
  auto calls = parse_forced_output(R"({"city": "Oslo"})",
                                   ToolChoice{ToolChoice::Kind::kFunction, "get_weather"});
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_EQ(calls[0].arguments, R"({"city":"Oslo"})");
  calls = parse_forced_output(
      R"([{"name": "now", "arguments": {}}, {"name": "get_weather", "arguments": {"city": "A"}}])",
      ToolChoice{ToolChoice::Kind::kRequired, ""});
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[1].name, "get_weather");
  // Cut short by max_tokens: no calls.
  EXPECT_TRUE(
      parse_forced_output(R"({"city": "Os)", ToolChoice{ToolChoice::Kind::kFunction, "get_weather"})
          .empty());
  EXPECT_TRUE(
      parse_forced_output(R"([{"name": "now", "argu)", ToolChoice{ToolChoice::Kind::kRequired, ""})
          .empty());
}

}  // namespace
}  // namespace llamaserve::toolcall
