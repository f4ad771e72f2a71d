#include "server/response_format.h"

#include <gtest/gtest.h>

#include "sse_parser.h"

namespace llamaserve::server {
namespace {

using nlohmann::json;
using test_util::parse_sse;

GenerationEvent delta(std::string text, std::vector<int32_t> tokens) {
  GenerationEvent event;
  event.text = std::move(text);
  event.tokens = std::move(tokens);
  return event;
}

GenerationEvent finish(FinishReason reason, int32_t prompt, int32_t completion) {
  GenerationEvent event;
  event.kind = GenerationEvent::Kind::kFinish;
  event.finish_reason = reason;
  event.usage.prompt_tokens = prompt;
  event.usage.completion_tokens = completion;
  event.usage.ttft_ms = 12.5;
  event.usage.total_ms = 40;
  return event;
}

ResponseIdentity identity() { return {"chatcmpl-1", 1700000000, "tiny"}; }

TEST(ChatCompletionFormat, StreamShape) {
  auto format = make_chat_completion_format(identity(), /*include_usage=*/false, false);
  std::string stream = format->stream_begin();
  stream += format->stream_delta(delta("Hel", {1}));
  stream += format->stream_delta(delta("lo\nthere", {2, 3}));
  stream += format->stream_end(finish(FinishReason::kLength, 5, 3));
  auto events = parse_sse(stream);
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events.back().data, "[DONE]");
  json first = json::parse(events[0].data);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["id"], "chatcmpl-1");
  EXPECT_EQ(first["model"], "tiny");
  EXPECT_EQ(first["created"], 1700000000);
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_FALSE(first.contains("usage"));
  std::string text;
  for (size_t i = 1; i < 3; ++i) {
    json chunk = json::parse(events[i].data);
    EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
    text += chunk["choices"][0]["delta"]["content"].get<std::string>();
  }
  EXPECT_EQ(text, "Hello\nthere");
  json last = json::parse(events[3].data);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(last["choices"][0]["delta"].empty());
}

TEST(ChatCompletionFormat, StreamUsageChunk) {
  auto format = make_chat_completion_format(identity(), /*include_usage=*/true, false);
  std::string stream = format->stream_begin();
  stream += format->stream_delta(delta("a", {1}));
  stream += format->stream_end(finish(FinishReason::kStop, 7, 1));
  auto events = parse_sse(stream);
  ASSERT_EQ(events.size(), 5u);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(json::parse(events[i].data)["usage"].is_null());
  json usage_chunk = json::parse(events[3].data);
  EXPECT_TRUE(usage_chunk["choices"].empty());
  EXPECT_EQ(usage_chunk["usage"]["prompt_tokens"], 7);
  EXPECT_EQ(usage_chunk["usage"]["completion_tokens"], 1);
  EXPECT_EQ(usage_chunk["usage"]["total_tokens"], 8);
  EXPECT_EQ(events[4].data, "[DONE]");
}

TEST(ChatCompletionFormat, BodyWithLogprobs) {
  auto format = make_chat_completion_format(identity(), false, /*logprobs=*/true);
  GenerationEvent d = delta("Hi", {4});
  d.logprobs = {{{4, "Hi", -0.5f}, {4, "Hi", -0.5f}, {9, "Yo", -1.5f}}};
  format->collect(d);
  format->collect(delta("!", {5}));
  json body = json::parse(format->body(finish(FinishReason::kStop, 3, 2)));
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(body["choices"][0]["message"]["content"], "Hi!");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(body["usage"]["total_tokens"], 5);
  const json& content = body["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 1u);
  EXPECT_EQ(content[0]["token"], "Hi");
  EXPECT_FLOAT_EQ(content[0]["logprob"].get<float>(), -0.5f);
  EXPECT_EQ(content[0]["bytes"], json::array({72, 105}));
  ASSERT_EQ(content[0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(content[0]["top_logprobs"][1]["token"], "Yo");
}

TEST(ChatCompletionFormat, ErrorEventEndsTheStream) {
  auto format = make_chat_completion_format(identity(), false, false);
  auto events = parse_sse(format->stream_error(request_timeout("too slow")));
  ASSERT_EQ(events.size(), 2u);
  json error = json::parse(events[0].data);
  EXPECT_EQ(error["error"]["code"], "request_timeout");
  EXPECT_EQ(error["error"]["message"], "too slow");
  EXPECT_EQ(events[1].data, "[DONE]");
}

ToolRequest tool_request(toolcall::ToolChoice choice, bool parallel = true) {
  ToolRequest request;
  request.tools = nlohmann::ordered_json::parse(
      R"([{"type": "function", "function": {"name": "f"}},
          {"type": "function", "function": {"name": "g"}}])");
  request.choice = std::move(choice);
  request.parallel_calls = parallel;
  return request;
}

TEST(ChatCompletionFormat, StreamedCallsAfterText) {
  auto format = make_chat_completion_format(
      identity(), false, false,
      ToolOutput::make(tool_request({toolcall::ToolChoice::Kind::kAuto, ""}),
                       toolcall::Syntax::kHermes));
  std::string stream = format->stream_begin();
  stream += format->stream_delta(delta("Let me check.\n<tool", {1}));
  stream +=
      format->stream_delta(delta("_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}", {2}));
  stream +=
      format->stream_delta(delta("\n</tool_call>\n<tool_call>{\"name\": \"g\"}</tool_call>", {3}));
  stream += format->stream_end(finish(FinishReason::kStop, 5, 3));
  auto events = parse_sse(stream);
  ASSERT_EQ(events.size(), 8u);  // role, text, 2 x 2 call chunks, finish, [DONE]
  EXPECT_EQ(json::parse(events[1].data)["choices"][0]["delta"]["content"], "Let me check.\n");
  const json head = json::parse(events[2].data)["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_EQ(head["index"], 0);
  EXPECT_EQ(head["type"], "function");
  EXPECT_EQ(head["function"]["name"], "f");
  EXPECT_EQ(head["function"]["arguments"], "");
  EXPECT_TRUE(head["id"].get<std::string>().starts_with("call_"));
  const json arguments = json::parse(events[3].data)["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_EQ(arguments["index"], 0);
  EXPECT_FALSE(arguments.contains("id"));
  EXPECT_EQ(arguments["function"]["arguments"], "{\"a\":1}");
  EXPECT_EQ(json::parse(events[4].data)["choices"][0]["delta"]["tool_calls"][0]["index"], 1);
  EXPECT_EQ(
      json::parse(events[5].data)["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"],
      "{}");
  EXPECT_EQ(json::parse(events[6].data)["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(events[7].data, "[DONE]");
}

TEST(ChatCompletionFormat, BodyWithCallsAndNoText) {
  // Parallel calls off: only the first call is kept.
  auto format = make_chat_completion_format(
      identity(), false, false,
      ToolOutput::make(tool_request({toolcall::ToolChoice::Kind::kRequired, ""}, false),
                       toolcall::Syntax::kHermes));
  format->collect(delta("[{\"name\": \"g\", \"arguments\": {}}, ", {1}));
  format->collect(delta("{\"name\": \"f\", \"arguments\": {}}]", {2}));
  const json body = json::parse(format->body(finish(FinishReason::kStop, 5, 2)));
  const json& choice = body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null());
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "g");
}

TEST(ChatCompletionFormat, ForcedCallCutShortIsContent) {
  auto format = make_chat_completion_format(
      identity(), false, false,
      ToolOutput::make(tool_request({toolcall::ToolChoice::Kind::kFunction, "f"}),
                       toolcall::Syntax::kLlama3));
  format->collect(delta("{\"a\": ", {1}));
  const json body = json::parse(format->body(finish(FinishReason::kLength, 5, 1)));
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["choices"][0]["message"]["content"], "{\"a\": ");
  EXPECT_FALSE(body["choices"][0]["message"].contains("tool_calls"));
}

TEST(ChatCompletionFormat, NoToolOutputWithoutTools) {
  ToolRequest none = tool_request({toolcall::ToolChoice::Kind::kNone, ""});
  EXPECT_EQ(ToolOutput::make(none, toolcall::Syntax::kHermes), nullptr);
  EXPECT_EQ(ToolOutput::make(ToolRequest{}, toolcall::Syntax::kHermes), nullptr);
}

TEST(CompletionFormat, StreamAndBody) {
  auto format = make_completion_format({"cmpl-1", 1, "tiny"}, false, /*logprobs=*/true);
  GenerationEvent a = delta("ab", {1});
  a.logprobs = {{{1, "ab", -0.1f}}};
  GenerationEvent b = delta("c", {2});
  b.logprobs = {{{2, "c", -0.2f}, {3, "d", -2.0f}}};
  std::string stream = format->stream_delta(a);  // one statement each: the order matters
  stream += format->stream_delta(b);
  stream += format->stream_end(finish(FinishReason::kStop, 1, 2));
  auto events = parse_sse(stream);
  ASSERT_EQ(events.size(), 4u);
  json second = json::parse(events[1].data);
  EXPECT_EQ(second["object"], "text_completion");
  EXPECT_EQ(second["choices"][0]["text"], "c");
  EXPECT_EQ(second["choices"][0]["logprobs"]["text_offset"], json::array({2}));
  EXPECT_EQ(json::parse(events[2].data)["choices"][0]["finish_reason"], "stop");

  auto whole = make_completion_format({"cmpl-2", 1, "tiny"}, false, true);
  whole->collect(a);
  whole->collect(b);
  json body = json::parse(whole->body(finish(FinishReason::kLength, 1, 2)));
  EXPECT_EQ(body["choices"][0]["text"], "abc");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  const json& logprobs = body["choices"][0]["logprobs"];
  EXPECT_EQ(logprobs["tokens"], json::array({"ab", "c"}));
  EXPECT_EQ(logprobs["text_offset"], json::array({0, 2}));
  EXPECT_FLOAT_EQ(logprobs["top_logprobs"][1]["d"].get<float>(), -2.0f);
}

TEST(SimpleChatFormat, TokenEventsAndDone) {
  auto format = make_simple_chat_format({"chat-1", 1, "tiny"});
  std::string stream = format->stream_begin();
  stream += format->stream_delta(delta("line one\nline two", {1, 2}));
  stream += format->stream_delta(delta(" end", {3}));
  stream += format->stream_end(finish(FinishReason::kLength, 4, 3));
  auto events = parse_sse(stream);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].type, "token");
  EXPECT_EQ(events[0].data, "line one\nline two");
  EXPECT_EQ(events[1].data, " end");
  EXPECT_EQ(events[2].type, "done");
  json done = json::parse(events[2].data);
  EXPECT_EQ(done["finish_reason"], "length");
  EXPECT_EQ(done["usage"]["completion_tokens"], 3);
  EXPECT_DOUBLE_EQ(done["timings"]["ttft_ms"].get<double>(), 12.5);

  auto error_events = parse_sse(format->stream_error(overloaded("busy", "queue_full", 1)));
  ASSERT_EQ(error_events.size(), 1u);
  EXPECT_EQ(error_events[0].type, "error");
  EXPECT_EQ(json::parse(error_events[0].data)["error"]["code"], "queue_full");
}

}  // namespace
}  // namespace llamaserve::server
