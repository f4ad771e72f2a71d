#include "server/request_parser.h"

#include <string>

#include <gtest/gtest.h>

namespace llamaserve::server {
namespace {

using nlohmann::json;

ParseLimits limits() {
  ParseLimits l;
  l.max_tokens_limit = 100;
  return l;
}

json chat_body(json extra = json::object()) {
  json body = {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  body.update(extra);
  return body;
}

// Expects a 400-class failure whose message mentions `needle`.
void expect_rejected(const Result<ParsedGeneration>& result, const std::string& needle) {
  ASSERT_FALSE(result.is_ok()) << "accepted, expected an error mentioning " << needle;
  EXPECT_NE(result.status().message().find(needle), std::string::npos) << result.status().message();
  EXPECT_TRUE(result.status().code() == StatusCode::kInvalidArgument ||
              result.status().code() == StatusCode::kUnsupported);
}

TEST(ParseJsonObject, RejectsInvalidUtf8WithOffset) {
  auto result = parse_json_object("{\"a\": \"x\xFF\"}");
  ASSERT_FALSE(result.is_ok());
  EXPECT_NE(result.status().message().find("UTF-8"), std::string::npos);
  EXPECT_NE(result.status().message().find("offset 8"), std::string::npos);
}

TEST(ParseJsonObject, RejectsMalformedEmptyNonObjectAndDeepJson) {
  EXPECT_FALSE(parse_json_object("{\"a\": ").is_ok());
  EXPECT_FALSE(parse_json_object("").is_ok());
  EXPECT_FALSE(parse_json_object("  \n").is_ok());
  EXPECT_FALSE(parse_json_object("[1, 2]").is_ok());
  EXPECT_FALSE(parse_json_object("\"text\"").is_ok());
  // A lone surrogate escape is valid ASCII but not valid JSON text.
  EXPECT_FALSE(parse_json_object("{\"a\": \"\\ud800\"}").is_ok());
  std::string deep = "{\"a\": " + std::string(100, '[') + std::string(100, ']') + "}";
  auto result = parse_json_object(deep);
  ASSERT_FALSE(result.is_ok());
  EXPECT_NE(result.status().message().find("nesting"), std::string::npos);
  // Brackets inside strings do not count as nesting.
  EXPECT_TRUE(parse_json_object("{\"a\": \"" + std::string(100, '[') + "\"}").is_ok());
}

TEST(ParseChat, ReadsMessagesAndSampling) {
  json body = chat_body({{"max_tokens", 12},
                         {"temperature", 0.5},
                         {"top_p", 0.9},
                         {"top_k", 40},
                         {"min_p", 0.05},
                         {"seed", 7},
                         {"stop", "END"},
                         {"presence_penalty", 0.5},
                         {"frequency_penalty", -0.5},
                         {"repetition_penalty", 1.1},
                         {"stream", true},
                         {"stream_options", {{"include_usage", true}}},
                         {"user", "u1"},
                         {"ignore_eos", true},
                         {"some_future_field", {1, 2, 3}}});
  body["messages"] = {
      {{"role", "system"}, {"content", "be brief"}},
      {{"role", "user"},
       {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}},
      {{"role", "assistant"}, {"content", nullptr}},
      {{"role", "developer"}, {"content", "d"}}};
  auto result = parse_chat_completion(body, limits());
  ASSERT_TRUE(result.is_ok()) << result.status().to_string();
  const ParsedGeneration& p = *result;
  EXPECT_EQ(p.model, "m");
  ASSERT_EQ(p.messages.size(), 4u);
  EXPECT_EQ(p.messages[0].role, "system");
  EXPECT_EQ(p.messages[1].content, "a\nb");
  EXPECT_EQ(p.messages[2].content, "");
  EXPECT_EQ(p.messages[3].role, "system");
  EXPECT_EQ(p.max_tokens, 12);
  EXPECT_FLOAT_EQ(p.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(p.sampling.top_p, 0.9f);
  EXPECT_EQ(p.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(p.sampling.min_p, 0.05f);
  EXPECT_EQ(p.sampling.seed, 7u);
  EXPECT_FLOAT_EQ(p.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(p.sampling.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(p.sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(p.stop, std::vector<std::string>{"END"});
  EXPECT_TRUE(p.stream);
  EXPECT_TRUE(p.include_usage);
  EXPECT_EQ(p.user, "u1");
  EXPECT_TRUE(p.ignore_eos);
}

TEST(ParseChat, ToolsAndToolCallsReachTheTemplate) {
  json body = chat_body(json::object());
  body["tools"] = {{{"type", "function"}, {"function", {{"name", "f"}}}}};
  body["messages"] = {
      {{"role", "user"}, {"content", "hi"}},
      {{"role", "assistant"},
       {"content", nullptr},
       {"tool_calls", {{{"id", "c1"}, {"function", {{"name", "f"}, {"arguments", "{}"}}}}}}},
      {{"role", "tool"}, {"content", "42"}, {"tool_call_id", "c1"}, {"name", "f"}}};
  auto result = parse_chat_completion(body, limits());
  ASSERT_TRUE(result.is_ok()) << result.status().to_string();
  EXPECT_EQ(result->tools.tools.size(), 1u);
  EXPECT_EQ(result->tools.tools[0]["function"]["name"], "f");
  EXPECT_EQ(result->tools.choice.kind, toolcall::ToolChoice::Kind::kAuto);
  EXPECT_TRUE(result->tools.calls_enabled());
  EXPECT_FALSE(result->tools.forced());
  EXPECT_TRUE(result->messages[0].fields.is_null());
  EXPECT_TRUE(result->messages[1].fields["content"].is_null());
  EXPECT_EQ(result->messages[1].fields["tool_calls"][0]["id"], "c1");
  EXPECT_EQ(result->messages[2].fields["tool_call_id"], "c1");
  EXPECT_EQ(result->messages[2].fields["name"], "f");

  body["tools"] = "f";
  expect_rejected(parse_chat_completion(body, limits()), "'tools'");
  body["tools"] = nullptr;
  body["messages"][1]["tool_calls"] = {1};
  expect_rejected(parse_chat_completion(body, limits()), "tool_calls[0]");
  body["messages"][1].erase("tool_calls");
  body["messages"][2]["tool_call_id"] = 5;
  expect_rejected(parse_chat_completion(body, limits()), "tool_call_id");
}

TEST(ParseChat, ToolChoiceAndParallelCalls) {
  json body = chat_body();
  body["tools"] = {{{"type", "function"}, {"function", {{"name", "f"}}}},
                   {{"type", "function"}, {"function", {{"name", "g.v2"}}}}};
  using Kind = toolcall::ToolChoice::Kind;
  const std::pair<json, Kind> choices[] = {
      {"none", Kind::kNone},
      {"auto", Kind::kAuto},
      {"required", Kind::kRequired},
      {{{"type", "function"}, {"function", {{"name", "g.v2"}}}}, Kind::kFunction}};
  for (const auto& [choice, kind] : choices) {
    body["tool_choice"] = choice;
    auto result = parse_chat_completion(body, limits());
    ASSERT_TRUE(result.is_ok()) << choice.dump() << ": " << result.status().to_string();
    EXPECT_EQ(result->tools.choice.kind, kind) << choice.dump();
    EXPECT_EQ(result->tools.forced(), kind == Kind::kRequired || kind == Kind::kFunction);
  }
  auto named = parse_chat_completion(body, limits());
  EXPECT_EQ(named->tools.choice.function, "g.v2");
  body["parallel_tool_calls"] = false;
  EXPECT_FALSE(parse_chat_completion(body, limits())->tools.parallel_calls);
  body["parallel_tool_calls"] = "no";
  expect_rejected(parse_chat_completion(body, limits()), "'parallel_tool_calls'");
  body.erase("parallel_tool_calls");

  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "h"}}}};
  expect_rejected(parse_chat_completion(body, limits()), "not among 'tools'");
  body["tool_choice"] = {{"type", "function"}};
  expect_rejected(parse_chat_completion(body, limits()), "'tool_choice' as an object");
  body["tool_choice"] = 3;
  expect_rejected(parse_chat_completion(body, limits()), "'tool_choice' must be");
  body["tool_choice"] = "required";
  body["response_format"] = {{"type", "json_object"}};
  expect_rejected(parse_chat_completion(body, limits()), "cannot be combined");

  // No tools: no calls, and nothing to choose from.
  json plain = chat_body();
  EXPECT_FALSE(parse_chat_completion(plain, limits())->tools.calls_enabled());
  plain["tool_choice"] = "auto";
  expect_rejected(parse_chat_completion(plain, limits()), "needs 'tools'");
  plain["tool_choice"] = "none";
  EXPECT_TRUE(parse_chat_completion(plain, limits()).is_ok());
}

TEST(ParseChat, RejectsMalformedTools) {
  const std::pair<json, std::string> cases[] = {
      {json::array({{{"type", "code_interpreter"}}}), "'tools[0].type'"},
      {json::array({{{"type", "function"}}}), "'tools[0].function' is required"},
      {json::array({{{"type", "function"}, {"function", {{"name", ""}}}}}), "function.name"},
      {json::array({{{"type", "function"}, {"function", {{"name", std::string(65, 'a')}}}}}),
       "function.name"},
      {json::array({{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", 1}}}}}),
       "parameters' must be an object"},
      {json::array({{{"type", "function"}, {"function", {{"name", "f"}, {"strict", "y"}}}}}),
       "strict"},
      {json::array({{{"type", "function"}, {"function", {{"name", "f"}}}},
                    {{"type", "function"}, {"function", {{"name", "f"}}}}}),
       "defined twice"},
  };
  for (const auto& [tools, needle] : cases) {
    expect_rejected(parse_chat_completion(chat_body({{"tools", tools}}), limits()), needle);
  }
  json many = json::array();
  for (size_t i = 0; i <= kMaxTools; ++i) {
    many.push_back({{"type", "function"}, {"function", {{"name", fmt::format("f{}", i)}}}});
  }
  expect_rejected(parse_chat_completion(chat_body({{"tools", many}}), limits()), "at most 128");
}

TEST(ParseChat, RejectsFieldsThatAreNotImplemented) {
  expect_rejected(parse_chat_completion(chat_body({{"audio", {{"voice", "x"}}}}), limits()),
                  "'audio' is not supported");
  expect_rejected(
      parse_chat_completion(chat_body({{"prediction", {{"type", "content"}}}}), limits()),
      "'prediction'");
  expect_rejected(parse_chat_completion(chat_body({{"functions", json::array()}}), limits()),
                  "use 'tools'");
  expect_rejected(parse_chat_completion(chat_body({{"function_call", "auto"}}), limits()),
                  "use 'tools'");
  expect_rejected(parse_chat_completion(chat_body({{"modalities", {"audio"}}}), limits()),
                  "'modalities'");
  EXPECT_TRUE(parse_chat_completion(chat_body({{"modalities", {"text"}}}), limits()).is_ok());
  EXPECT_TRUE(parse_chat_completion(chat_body({{"audio", nullptr}}), limits()).is_ok());
}

TEST(ParseChat, DefaultsAndNulls) {
  auto result = parse_chat_completion(
      chat_body({{"max_tokens", nullptr}, {"temperature", nullptr}, {"stop", nullptr}}), limits());
  ASSERT_TRUE(result.is_ok()) << result.status().to_string();
  EXPECT_FALSE(result->max_tokens.has_value());
  EXPECT_FLOAT_EQ(result->sampling.temperature, SamplingParams{}.temperature);
  EXPECT_TRUE(result->stop.empty());
  EXPECT_FALSE(result->stream);
}

TEST(ParseChat, TopPZeroMeansGreedy) {
  auto result = parse_chat_completion(chat_body({{"top_p", 0}, {"temperature", 0.8}}), limits());
  ASSERT_TRUE(result.is_ok());
  EXPECT_FLOAT_EQ(result->sampling.temperature, 0.0f);
  EXPECT_FLOAT_EQ(result->sampling.top_p, 1.0f);
}

TEST(ParseChat, MaxCompletionTokensWinsOverMaxTokens) {
  auto result = parse_chat_completion(chat_body({{"max_tokens", 50}, {"max_completion_tokens", 5}}),
                                      limits());
  ASSERT_TRUE(result.is_ok());
  EXPECT_EQ(result->max_tokens, 5);
}

TEST(ParseChat, RejectsBadMessages) {
  expect_rejected(parse_chat_completion({{"model", "m"}}, limits()), "'messages' is required");
  expect_rejected(parse_chat_completion(chat_body({{"messages", json::array()}}), limits()),
                  "at least one message");
  expect_rejected(parse_chat_completion(chat_body({{"messages", "hi"}}), limits()),
                  "'messages' must be an array");
  expect_rejected(parse_chat_completion(chat_body({{"messages", {1}}}), limits()),
                  "'messages[0]' must be an object");
  expect_rejected(parse_chat_completion(chat_body({{"messages", {{{"content", "x"}}}}}), limits()),
                  "'messages[0].role' is required");
  expect_rejected(
      parse_chat_completion(chat_body({{"messages", {{{"role", "wizard"}, {"content", "x"}}}}}),
                            limits()),
      "wizard");
  expect_rejected(parse_chat_completion(
                      chat_body({{"messages", {{{"role", "user"}, {"content", 5}}}}}), limits()),
                  "'messages[0].content' must be a string or an array");
  expect_rejected(parse_chat_completion(chat_body({{"messages", {{{"role", "user"}}}}}), limits()),
                  "'messages[0].content' is required");
  json image = {{"role", "user"},
                {"content", {{{"type", "image_url"}, {"image_url", {{"url", "x"}}}}}}};
  expect_rejected(parse_chat_completion(chat_body({{"messages", {image}}}), limits()), "image_url");
}

TEST(ParseChat, RejectsWrongTypes) {
  expect_rejected(parse_chat_completion(chat_body({{"max_tokens", "10"}}), limits()),
                  "'max_tokens' must be an integer, got a string");
  expect_rejected(parse_chat_completion(chat_body({{"max_tokens", 1.5}}), limits()),
                  "'max_tokens' must be an integer");
  // Whole numbers written as floats are integers; one past 64 bits is out of range, not a
  // non-integer.
  auto whole = parse_chat_completion(chat_body({{"max_tokens", 2.0}}), limits());
  ASSERT_TRUE(whole.is_ok()) << whole.status().to_string();
  EXPECT_EQ(whole->max_tokens, 2);
  expect_rejected(parse_chat_completion(json::parse(R"({"messages": [{"role": "user",
                      "content": "x"}], "max_tokens": 99999999999999999999999})"),
                                        limits()),
                  "'max_tokens' must be between 1 and");
  expect_rejected(parse_chat_completion(chat_body({{"max_tokens", -1e30}}), limits()),
                  "'max_tokens' must be between 1 and");
  expect_rejected(parse_chat_completion(chat_body({{"temperature", "hot"}}), limits()),
                  "'temperature' must be a number");
  expect_rejected(parse_chat_completion(chat_body({{"stream", "yes"}}), limits()),
                  "'stream' must be a boolean");
  expect_rejected(parse_chat_completion(chat_body({{"stop", 3}}), limits()), "'stop'");
  expect_rejected(parse_chat_completion(chat_body({{"stop", {"a", 3}}}), limits()), "'stop[1]'");
  expect_rejected(parse_chat_completion(chat_body({{"model", 3}}), limits()), "'model'");
  expect_rejected(parse_chat_completion(chat_body({{"seed", "x"}}), limits()), "'seed'");
  expect_rejected(parse_chat_completion(chat_body({{"stream_options", true}}), limits()),
                  "'stream_options'");
  expect_rejected(
      parse_chat_completion(chat_body({{"stream_options", {{"include_usage", 1}}}}), limits()),
      "include_usage");
  expect_rejected(parse_chat_completion(chat_body({{"logprobs", 1}}), limits()), "'logprobs'");
  expect_rejected(parse_chat_completion(chat_body({{"ignore_eos", "yes"}}), limits()),
                  "'ignore_eos'");
}

TEST(ParseChat, RejectsOutOfRangeValues) {
  expect_rejected(parse_chat_completion(chat_body({{"max_tokens", -1}}), limits()),
                  "between 1 and 100");
  expect_rejected(parse_chat_completion(chat_body({{"max_tokens", 0}}), limits()),
                  "between 1 and 100");
  expect_rejected(parse_chat_completion(chat_body({{"max_tokens", 101}}), limits()),
                  "--max-tokens-limit");
  expect_rejected(
      parse_chat_completion(chat_body({{"max_tokens", 18446744073709551615ull}}), limits()),
      "18446744073709551615");
  expect_rejected(parse_chat_completion(chat_body({{"max_completion_tokens", 1000}}), limits()),
                  "max_completion_tokens");
  expect_rejected(parse_chat_completion(chat_body({{"temperature", 2.5}}), limits()),
                  "'temperature'");
  expect_rejected(parse_chat_completion(chat_body({{"temperature", -0.1}}), limits()),
                  "'temperature'");
  expect_rejected(parse_chat_completion(chat_body({{"top_p", 1.5}}), limits()), "'top_p'");
  expect_rejected(parse_chat_completion(chat_body({{"top_k", -1}}), limits()), "'top_k'");
  expect_rejected(parse_chat_completion(chat_body({{"repetition_penalty", 0}}), limits()),
                  "'repetition_penalty'");
  expect_rejected(parse_chat_completion(chat_body({{"presence_penalty", 3}}), limits()),
                  "'presence_penalty'");
  expect_rejected(parse_chat_completion(chat_body({{"n", 2}}), limits()), "'n' must be 1");
  expect_rejected(parse_chat_completion(chat_body({{"top_logprobs", 3}}), limits()),
                  "requires 'logprobs'");
  expect_rejected(
      parse_chat_completion(chat_body({{"logprobs", true}, {"top_logprobs", 21}}), limits()),
      "'top_logprobs'");
  expect_rejected(parse_chat_completion(
                      chat_body({{"stop", json(std::vector<std::string>(17, "x"))}}), limits()),
                  "at most 16");
  expect_rejected(parse_chat_completion(chat_body({{"logit_bias", {{"5", 1}}}}), limits()),
                  "logit_bias");
}

TEST(ParseChat, AcceptsNOfOneLogprobsAndNegativeSeed) {
  auto result = parse_chat_completion(
      chat_body(
          {{"n", 1}, {"logprobs", true}, {"top_logprobs", 3}, {"seed", -1}, {"stop", {"a", ""}}}),
      limits());
  ASSERT_TRUE(result.is_ok()) << result.status().to_string();
  EXPECT_TRUE(result->sampling.logprobs);
  EXPECT_EQ(result->sampling.top_logprobs, 3);
  EXPECT_EQ(result->sampling.seed, ~uint64_t{0});
  EXPECT_EQ(result->stop, std::vector<std::string>{"a"});  // empty stop strings are dropped
}

TEST(ParseCompletion, PromptForms) {
  auto text = parse_completion({{"prompt", "Once"}}, limits());
  ASSERT_TRUE(text.is_ok());
  EXPECT_EQ(text->prompt_kind, PromptKind::kText);
  EXPECT_EQ(text->prompt_text, "Once");

  auto tokens = parse_completion({{"prompt", {1, 2, 3}}}, limits());
  ASSERT_TRUE(tokens.is_ok());
  EXPECT_EQ(tokens->prompt_kind, PromptKind::kTokens);
  EXPECT_EQ(tokens->prompt_tokens, (std::vector<int32_t>{1, 2, 3}));

  auto batch_of_one = parse_completion({{"prompt", {"Once"}}}, limits());
  ASSERT_TRUE(batch_of_one.is_ok());
  EXPECT_EQ(batch_of_one->prompt_text, "Once");

  auto tokens_of_one = parse_completion({{"prompt", {{4, 5}}}}, limits());
  ASSERT_TRUE(tokens_of_one.is_ok());
  EXPECT_EQ(tokens_of_one->prompt_tokens, (std::vector<int32_t>{4, 5}));

  auto empty_text = parse_completion({{"prompt", ""}}, limits());
  ASSERT_TRUE(empty_text.is_ok());

  auto logprobs = parse_completion({{"prompt", "x"}, {"logprobs", 2}}, limits());
  ASSERT_TRUE(logprobs.is_ok());
  EXPECT_TRUE(logprobs->sampling.logprobs);
  EXPECT_EQ(logprobs->sampling.top_logprobs, 2);
}

TEST(ParseCompletion, RejectsBadPrompts) {
  expect_rejected(parse_completion(json::object(), limits()), "'prompt' is required");
  expect_rejected(parse_completion({{"prompt", 5}}, limits()), "'prompt' must be");
  expect_rejected(parse_completion({{"prompt", json::array()}}, limits()), "empty array");
  expect_rejected(parse_completion({{"prompt", {"a", "b"}}}, limits()), "2 prompts");
  expect_rejected(parse_completion({{"prompt", {1, -2}}}, limits()), "not a valid token id");
  expect_rejected(parse_completion({{"prompt", {1, "x"}}}, limits()), "'prompt[1]'");
  expect_rejected(parse_completion({{"prompt", {1, 3000000000ll}}}, limits()),
                  "not a valid token id");
  expect_rejected(parse_completion({{"prompt", "x"}, {"echo", true}}, limits()), "echo");
  expect_rejected(parse_completion({{"prompt", "x"}, {"best_of", 3}}, limits()), "best_of");
  expect_rejected(parse_completion({{"prompt", "x"}, {"suffix", "s"}}, limits()), "suffix");
  expect_rejected(parse_completion({{"prompt", "x"}, {"logprobs", 6}}, limits()), "'logprobs'");
  expect_rejected(parse_completion({{"prompt", "x"}, {"logprobs", true}}, limits()), "'logprobs'");
}

TEST(ParseSimpleChat, ReadsCamelCaseFields) {
  auto result = parse_simple_chat({{"prompt", "Hi"},
                                   {"maxTokens", 32},
                                   {"system", "sys"},
                                   {"temperature", 0},
                                   {"topK", 5},
                                   {"ignoreEos", true},
                                   {"seed", 3}},
                                  limits());
  ASSERT_TRUE(result.is_ok()) << result.status().to_string();
  EXPECT_TRUE(result->stream);
  ASSERT_EQ(result->messages.size(), 2u);
  EXPECT_EQ(result->messages[0].role, "system");
  EXPECT_EQ(result->messages[1].role, "user");
  EXPECT_EQ(result->messages[1].content, "Hi");
  EXPECT_EQ(result->max_tokens, 32);
  EXPECT_FLOAT_EQ(result->sampling.temperature, 0.0f);
  EXPECT_EQ(result->sampling.top_k, 5);
  EXPECT_TRUE(result->ignore_eos);
  auto not_streamed = parse_simple_chat({{"prompt", "Hi"}, {"stream", false}}, limits());
  ASSERT_TRUE(not_streamed.is_ok());
  EXPECT_FALSE(not_streamed->stream);
}

TEST(ParseSimpleChat, RejectsBadInput) {
  expect_rejected(parse_simple_chat(json::object(), limits()), "'prompt' is required");
  expect_rejected(parse_simple_chat({{"prompt", ""}}, limits()), "must not be empty");
  expect_rejected(parse_simple_chat({{"prompt", {"x"}}}, limits()), "'prompt' must be a string");
  expect_rejected(parse_simple_chat({{"prompt", "x"}, {"maxTokens", "3"}}, limits()),
                  "'maxTokens'");
  expect_rejected(parse_simple_chat({{"prompt", "x"}, {"maxTokens", 1000}}, limits()),
                  "--max-tokens-limit");
}

TEST(ParseTokenize, ContentAndFlags) {
  auto ok = parse_tokenize({{"content", "hello"}, {"add_special", true}});
  ASSERT_TRUE(ok.is_ok());
  EXPECT_EQ(ok->content, "hello");
  EXPECT_TRUE(ok->add_special);
  EXPECT_TRUE(ok->parse_special);
  EXPECT_FALSE(parse_tokenize(json::object()).is_ok());
  EXPECT_FALSE(parse_tokenize({{"content", 1}}).is_ok());
  EXPECT_FALSE(parse_tokenize({{"content", "x"}, {"add_special", "no"}}).is_ok());
}

TEST(ParseDetokenize, TokenIds) {
  auto ok = parse_detokenize({{"tokens", {1, 2}}});
  ASSERT_TRUE(ok.is_ok());
  EXPECT_EQ(*ok, (std::vector<int32_t>{1, 2}));
  auto empty = parse_detokenize({{"tokens", json::array()}});
  ASSERT_TRUE(empty.is_ok());
  EXPECT_TRUE(empty->empty());
  EXPECT_FALSE(parse_detokenize(json::object()).is_ok());
  EXPECT_FALSE(parse_detokenize({{"tokens", "1 2"}}).is_ok());
  EXPECT_FALSE(parse_detokenize({{"tokens", {-1}}}).is_ok());
  EXPECT_FALSE(parse_detokenize({{"tokens", {1.5}}}).is_ok());
}

TEST(ParseResponseFormat, TextJsonObjectAndJsonSchema) {
  using Kind = ResponseFormatSpec::Kind;
  auto text = parse_chat_completion(chat_body({{"response_format", {{"type", "text"}}}}), limits());
  ASSERT_TRUE(text.is_ok());
  EXPECT_EQ(text->response_format.kind, Kind::kText);
  auto object =
      parse_chat_completion(chat_body({{"response_format", {{"type", "json_object"}}}}), limits());
  ASSERT_TRUE(object.is_ok());
  EXPECT_EQ(object->response_format.kind, Kind::kJsonObject);
  auto schema = parse_completion(json::parse(R"({"prompt": "x", "response_format": {
      "type": "json_schema", "json_schema": {"name": "person_v2", "strict": true,
      "schema": {"type": "object"}}}})"),
                                 limits());
  ASSERT_TRUE(schema.is_ok()) << schema.status().to_string();
  EXPECT_EQ(schema->response_format.kind, Kind::kJsonSchema);
  EXPECT_EQ(schema->response_format.name, "person_v2");
  EXPECT_TRUE(schema->response_format.strict);
}

TEST(ParseResponseFormat, RejectsMalformedFormats) {
  auto parse = [](json format) {
    return parse_chat_completion(chat_body({{"response_format", format}}), limits());
  };
  expect_rejected(parse("json"), "response_format");
  expect_rejected(parse(json::object()), "response_format.type");
  expect_rejected(parse({{"type", "yaml"}}), "text, json_object, json_schema");
  expect_rejected(parse({{"type", "json_schema"}}), "response_format.json_schema");
  expect_rejected(parse({{"type", "json_schema"}, {"json_schema", {{"name", "x"}}}}),
                  "response_format.json_schema.schema");
  expect_rejected(parse({{"type", "json_schema"}, {"json_schema", {{"schema", "string"}}}}),
                  "response_format.json_schema.schema");
  expect_rejected(parse({{"type", "json_schema"},
                         {"json_schema", {{"name", "a b"}, {"schema", json::object()}}}}),
                  "name");
  expect_rejected(parse({{"type", "json_schema"},
                         {"json_schema", {{"strict", "yes"}, {"schema", json::object()}}}}),
                  "strict");
  // json_schema is checked even when the type does not use it.
  expect_rejected(parse({{"type", "text"}, {"json_schema", {{"schema", 1}}}}), "schema");
}

}  // namespace
}  // namespace llamaserve::server
