#include "toolcall/tool_prompt.h"

#include <gtest/gtest.h>

namespace llamaserve::toolcall {
namespace {

using nlohmann::ordered_json;

const ordered_json kTools = ordered_json::parse(
    R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather now",
         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");

std::vector<ChatMessage> conversation() {
  ChatMessage user{"user", "Weather in Oslo?", nullptr};
  ChatMessage assistant{"assistant", "", ordered_json::parse(R"({"content": null, "tool_calls": [
      {"id": "call_1", "type": "function",
       "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]})")};
  ChatMessage tool{"tool", "{\"celsius\": -3}", ordered_json{{"tool_call_id", "call_1"}}};
  return {user, assistant, tool};
}

TEST(MessagesForTemplate, TemplateThatKnowsToolsGetsArgumentsAsObjects) {
  const TemplateToolSupport support{Syntax::kLlama3, true, true};
  const auto messages = messages_for_template(conversation(), kTools, support);
  ASSERT_EQ(messages.size(), 3u);
  EXPECT_EQ(messages[1].fields["tool_calls"][0]["function"]["arguments"],
            ordered_json({{"city", "Oslo"}}));
  EXPECT_EQ(messages[2].role, "tool");
}

TEST(MessagesForTemplate, DeepSeekKeepsArgumentText) {
  // Its template writes earlier calls (concatenating the arguments as text) but does not
  // list tools: a system message describes them.
  const TemplateToolSupport support{Syntax::kDeepSeek, false, true};
  const auto messages = messages_for_template(conversation(), kTools, support);
  ASSERT_EQ(messages.size(), 4u);
  EXPECT_EQ(messages[0].role, "system");
  EXPECT_EQ(messages[2].fields["tool_calls"][0]["function"]["arguments"], "{\"city\": \"Oslo\"}");
  EXPECT_EQ(messages[3].role, "tool");
}

TEST(MessagesForTemplate, TemplateWithoutToolsGetsThemWrittenOut) {
  const TemplateToolSupport support{};  // generic
  const auto messages = messages_for_template(conversation(), kTools, support);
  ASSERT_EQ(messages.size(), 4u);
  EXPECT_EQ(messages[0].role, "system");
  EXPECT_NE(messages[0].content.find("\"name\":\"get_weather\""), std::string::npos);
  EXPECT_NE(messages[0].content.find("<tool_call>"), std::string::npos);
  EXPECT_EQ(messages[2].role, "assistant");
  EXPECT_EQ(messages[2].content,
            "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}}\n"
            "</tool_call>");
  EXPECT_TRUE(messages[2].fields.is_null());
  EXPECT_EQ(messages[3].role, "user");
  EXPECT_EQ(messages[3].content, "<tool_response>\n{\"celsius\": -3}\n</tool_response>");
}

TEST(MessagesForTemplate, InstructionsJoinTheClientsSystemMessage) {
  std::vector<ChatMessage> messages = {{"system", "Be brief.", nullptr}, {"user", "Hi", nullptr}};
  const auto out = messages_for_template(messages, kTools, TemplateToolSupport{});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(out[0].content.starts_with("Be brief.\n\n"));
  EXPECT_EQ(out[0].content, "Be brief.\n\n" + tool_instructions(kTools));
}

TEST(MessagesForTemplate, NoToolsNoInstructions) {
  std::vector<ChatMessage> messages = {{"user", "Hi", nullptr}};
  EXPECT_EQ(messages_for_template(messages, nullptr, TemplateToolSupport{}).size(), 1u);
}

}  // namespace
}  // namespace llamaserve::toolcall
