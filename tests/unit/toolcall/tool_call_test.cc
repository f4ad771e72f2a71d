// Each family's call syntax, written out by hand the way its model produces it.
#include "toolcall/tool_call.h"

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace llamaserve::toolcall {
namespace {

using nlohmann::json;

std::string read_template(const std::string& name) {
  std::ifstream in(std::string(LLAMASERVE_FIXTURES_DIR) + "/chat-templates/" + name);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void expect_call(const ToolCall& call, const std::string& name, const json& arguments) {
  EXPECT_EQ(call.name, name);
  EXPECT_EQ(json::parse(call.arguments), arguments) << call.arguments;
  EXPECT_FALSE(call.id.empty());
}

TEST(DetectToolSupport, PublishedTemplates) {
  struct Case {
    const char* file;
    Syntax syntax;
    bool renders_tools;
    bool renders_tool_calls;
  };
  const Case cases[] = {
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", Syntax::kLlama3, true, true},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", Syntax::kLlama3, true, true},
      {"Qwen-Qwen2.5-7B-Instruct.jinja", Syntax::kHermes, true, true},
      {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", Syntax::kHermes, true, true},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", Syntax::kMistral, true, true},
      {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", Syntax::kDeepSeek, false, true},
      {"microsoft-Phi-3.5-mini-instruct.jinja", Syntax::kGeneric, false, false},
      {"HuggingFaceTB-SmolLM3-3B.jinja", Syntax::kGeneric, false, false},
  };
  for (const Case& c : cases) {
    const std::string text = read_template(c.file);
    ASSERT_FALSE(text.empty()) << c.file;
    const TemplateToolSupport support = detect_tool_support(text);
    EXPECT_EQ(support.syntax, c.syntax) << c.file << ": " << syntax_name(support.syntax);
    EXPECT_EQ(support.renders_tools, c.renders_tools) << c.file;
    EXPECT_EQ(support.renders_tool_calls, c.renders_tool_calls) << c.file;
  }
  EXPECT_EQ(detect_tool_support("").syntax, Syntax::kGeneric);
}

TEST(ParseOutput, HermesBlocksWithTextBefore) {
  const ParsedOutput out = parse_output(
      "Let me look that up.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
      "{\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>\n<tool_call>\n{\"name\": "
      "\"get_time\", \"arguments\": {\"zone\": \"CET\"}}\n</tool_call>",
      Syntax::kHermes);
  EXPECT_EQ(out.content, "Let me look that up.");
  ASSERT_EQ(out.calls.size(), 2u);
  expect_call(out.calls[0], "get_weather", {{"city", "Paris"}, {"unit", "celsius"}});
  expect_call(out.calls[1], "get_time", {{"zone", "CET"}});
  EXPECT_NE(out.calls[0].id, out.calls[1].id);
  EXPECT_TRUE(out.calls[0].id.starts_with("call_"));
  EXPECT_EQ(out.calls[0].id.size(), 5u + 24u);
}

TEST(ParseOutput, HermesLastBlockUnclosed) {
  const ParsedOutput out =
      parse_output("<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n", Syntax::kHermes);
  ASSERT_EQ(out.calls.size(), 1u);
  expect_call(out.calls[0], "f", json::object());
  EXPECT_EQ(out.content, "");
}

TEST(ParseOutput, Llama3PythonTagAndBareJson) {
  ParsedOutput out =
      parse_output("<|python_tag|>{\"name\": \"search\", \"parameters\": {\"query\": \"llamas\"}}",
                   Syntax::kLlama3);
  ASSERT_EQ(out.calls.size(), 1u);
  expect_call(out.calls[0], "search", {{"query", "llamas"}});

  // LLaMA 3.2 writes calls without the tag, several separated by ";".
  out = parse_output(
      "{\"type\": \"function\", \"name\": \"a\", \"parameters\": {\"x\": 1}}; {\"name\": \"b\", "
      "\"parameters\": {}}",
      Syntax::kLlama3);
  ASSERT_EQ(out.calls.size(), 2u);
  expect_call(out.calls[0], "a", {{"x", 1}});
  expect_call(out.calls[1], "b", json::object());
  // The end-of-message token's text where the vocabulary does not end generation on it.
  out = parse_output("<|python_tag|>{\"name\": \"f\", \"parameters\": {}}<|eom_id|>",
                     Syntax::kLlama3);
  ASSERT_EQ(out.calls.size(), 1u);
  expect_call(out.calls[0], "f", json::object());
}

TEST(ParseOutput, MistralKeepsTheModelsIds) {
  const ParsedOutput out = parse_output(
      "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3}, \"id\": "
      "\"a1B2c3D4e\"}, {\"name\": \"neg\", \"arguments\": {\"a\": 1}, \"id\": \"Z9y8X7w6v\"}]",
      Syntax::kMistral);
  ASSERT_EQ(out.calls.size(), 2u);
  expect_call(out.calls[0], "add", {{"a", 2}, {"b", 3}});
  EXPECT_EQ(out.calls[0].id, "a1B2c3D4e");
  EXPECT_EQ(out.calls[1].id, "Z9y8X7w6v");
  // Without the control token's text (a decoder that skips it), the array alone.
  EXPECT_EQ(parse_output("[{\"name\": \"add\", \"arguments\": {}}]", Syntax::kMistral).calls.size(),
            1u);
}

TEST(ParseOutput, DeepSeekCalls) {
  const ParsedOutput out = parse_output(
      "Thinking done.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>lookup\n"
      "```json\n{\"id\": 42}\n```<｜tool▁call▁end｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
      "ping\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
      Syntax::kDeepSeek);
  EXPECT_EQ(out.content, "Thinking done.");
  ASSERT_EQ(out.calls.size(), 2u);
  expect_call(out.calls[0], "lookup", {{"id", 42}});
  expect_call(out.calls[1], "ping", json::object());
}

TEST(ParseOutput, ArgumentsAsJsonString) {
  const ParsedOutput out =
      parse_output("{\"name\": \"f\", \"arguments\": \"{\\\"k\\\": [1, 2]}\"}", Syntax::kGeneric);
  ASSERT_EQ(out.calls.size(), 1u);
  expect_call(out.calls[0], "f", {{"k", {1, 2}}});
}

TEST(ParseOutput, OtherFamiliesFallBackToHermesBlocksAndBareJson) {
  EXPECT_EQ(
      parse_output("<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", Syntax::kLlama3)
          .calls.size(),
      1u);
  EXPECT_EQ(parse_output("  {\"name\": \"f\", \"arguments\": {}}\n", Syntax::kHermes).calls.size(),
            1u);
}

TEST(ParseOutput, TextThatIsNoCallStaysContent) {
  const char* texts[] = {
      "Paris is the capital of France.",
      "{\"answer\": 42}",                                      // JSON, but no call
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\"",  // cut short
      "<tool_call>not json</tool_call>",
      "{\"name\": \"\", \"arguments\": {}}",       // empty name
      "{\"name\": \"f\", \"arguments\": [1, 2]}",  // arguments not an object
      "[]",
      "[TOOL_CALLS]",
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f",
  };
  for (const char* text : texts) {
    for (Syntax syntax : {Syntax::kHermes, Syntax::kLlama3, Syntax::kMistral, Syntax::kDeepSeek,
                          Syntax::kGeneric}) {
      const ParsedOutput out = parse_output(text, syntax);
      EXPECT_TRUE(out.calls.empty()) << text << " as " << syntax_name(syntax);
      EXPECT_EQ(out.content, text) << syntax_name(syntax);
    }
  }
}

}  // namespace
}  // namespace llamaserve::toolcall
