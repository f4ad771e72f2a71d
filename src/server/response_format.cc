#include "server/response_format.h"

#include "server/sse.h"

namespace llamaserve::server {
namespace {

using nlohmann::json;

json token_bytes_json(const std::string& text) {
  json bytes = json::array();
  for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
  return bytes;
}

// Chat logprobs: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}.
// Each engine entry holds the chosen token first, then the alternatives.
json chat_logprobs_content(const std::vector<std::vector<TokenLogprob>>& per_token) {
  json content = json::array();
  for (const auto& entry : per_token) {
    if (entry.empty()) continue;
    json top = json::array();
    for (size_t i = 1; i < entry.size(); ++i) {
      top.push_back({{"token", entry[i].text},
                     {"logprob", entry[i].logprob},
                     {"bytes", token_bytes_json(entry[i].text)}});
    }
    content.push_back({{"token", entry[0].text},
                       {"logprob", entry[0].logprob},
                       {"bytes", token_bytes_json(entry[0].text)},
                       {"top_logprobs", std::move(top)}});
  }
  return content;
}

// Legacy completions logprobs: parallel arrays plus per-token alternatives as a map.
struct CompletionLogprobs {
  json tokens = json::array();
  json token_logprobs = json::array();
  json top_logprobs = json::array();
  json text_offset = json::array();
  size_t offset = 0;  // bytes of token text so far

  void add(const std::vector<std::vector<TokenLogprob>>& per_token) {
    for (const auto& entry : per_token) {
      if (entry.empty()) continue;
      tokens.push_back(entry[0].text);
      token_logprobs.push_back(entry[0].logprob);
      json top = json::object();
      for (size_t i = 1; i < entry.size(); ++i) top[entry[i].text] = entry[i].logprob;
      top_logprobs.push_back(std::move(top));
      text_offset.push_back(offset);
      offset += entry[0].text.size();
    }
  }
  json to_json() const {
    return {{"tokens", tokens},
            {"token_logprobs", token_logprobs},
            {"top_logprobs", top_logprobs},
            {"text_offset", text_offset}};
  }
};

std::string openai_error_event(const ApiError& error) {
  std::string out = sse_data(dump_json(error_json(error)));
  out.append(kSseDone);
  return out;
}

// What an OpenAI stream sends after its last chunk: with stream_options.include_usage a chunk
// of no choices and the usage (`header`: the stream's id, object, created and model), then
// "data: [DONE]".
std::string openai_stream_tail(json header, bool include_usage, const Usage& usage) {
  std::string out;
  if (include_usage) {
    header["choices"] = json::array();
    header["usage"] = usage_json(usage);
    out = sse_data(dump_json(header));
  }
  out.append(kSseDone);
  return out;
}

// An OpenAI tool call: {"id", "type": "function", "function": {"name", "arguments"}}.
json tool_call_json(const toolcall::ToolCall& call) {
  return {{"id", call.id},
          {"type", "function"},
          {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

// The fields every OpenAI response and stream chunk starts with.
json openai_header(const ResponseIdentity& identity, const char* object) {
  return {{"id", identity.id},
          {"object", object},
          {"created", identity.created},
          {"model", identity.model}};
}

// A stream chunk: `header` with one choice (index 0: `choice`'s fields, logprobs and
// finish_reason), and "usage": null when the stream reports usage (in its last chunk).
std::string openai_chunk(json header, json choice, json logprobs, json finish_reason,
                         bool include_usage) {
  choice["index"] = 0;
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = std::move(finish_reason);
  header["choices"] = json::array({std::move(choice)});
  if (include_usage) header["usage"] = nullptr;
  return sse_data(dump_json(header));
}

class ChatCompletionFormat : public ResponseFormat {
 public:
  ChatCompletionFormat(ResponseIdentity identity, bool include_usage, bool logprobs,
                       std::unique_ptr<ToolOutput> tools)
      : identity_(std::move(identity)),
        include_usage_(include_usage),
        logprobs_(logprobs),
        tools_(std::move(tools)) {}

  std::string stream_begin() override {
    return chunk({{"role", "assistant"}, {"content", ""}}, nullptr, nullptr);
  }

  std::string stream_delta(const GenerationEvent& delta) override {
    json logprobs = nullptr;
    if (logprobs_) logprobs = {{"content", chat_logprobs_content(delta.logprobs)}};
    if (!tools_) return chunk({{"content", delta.text}}, logprobs, nullptr);
    // Logprobs ride with the content they belong to; text held for a possible call has none.
    const std::string content = tools_->feed(delta.text);
    if (content.empty()) return {};
    return chunk({{"content", content}}, logprobs, nullptr);
  }

  // A call goes out as two chunks, as OpenAI streams them: its id, type and name with empty
  // arguments, then the arguments (clients append argument pieces by the call's index).
  std::string stream_end(const GenerationEvent& finish) override {
    std::string out;
    const char* finish_reason = openai_finish_reason(finish.finish_reason);
    if (tools_) {
      toolcall::ParsedOutput rest = tools_->finish();
      if (!rest.content.empty()) out += chunk({{"content", rest.content}}, nullptr, nullptr);
      for (size_t i = 0; i < rest.calls.size(); ++i) {
        const toolcall::ToolCall& call = rest.calls[i];
        out += chunk({{"tool_calls",
                       json::array({{{"index", i},
                                     {"id", call.id},
                                     {"type", "function"},
                                     {"function", {{"name", call.name}, {"arguments", ""}}}}})}},
                     nullptr, nullptr);
        out +=
            chunk({{"tool_calls",
                    json::array({{{"index", i}, {"function", {{"arguments", call.arguments}}}}})}},
                  nullptr, nullptr);
      }
      if (!rest.calls.empty()) finish_reason = "tool_calls";
    }
    out += chunk(json::object(), nullptr, finish_reason);
    out += openai_stream_tail(header(), include_usage_, finish.usage);
    return out;
  }

  std::string stream_error(const ApiError& error) override { return openai_error_event(error); }

  void collect(const GenerationEvent& delta) override {
    text_ += tools_ ? tools_->feed(delta.text) : delta.text;
    if (logprobs_) {
      json more = chat_logprobs_content(delta.logprobs);
      for (auto& item : more) logprob_content_.push_back(std::move(item));
    }
  }

  std::string body(const GenerationEvent& finish) override {
    json body = openai_header(identity_, "chat.completion");
    json message = {{"role", "assistant"}, {"content", text_}};
    const char* finish_reason = openai_finish_reason(finish.finish_reason);
    if (tools_) {
      toolcall::ParsedOutput rest = tools_->finish();
      text_ += rest.content;
      message["content"] = text_;
      if (!rest.calls.empty()) {
        // The text beside the calls, without the white space that separated them; null
        // when there is none, as OpenAI answers a turn that only calls tools.
        const size_t first = text_.find_first_not_of(" \t\r\n");
        const size_t last = text_.find_last_not_of(" \t\r\n");
        message["content"] = first == std::string::npos
                                 ? json(nullptr)
                                 : json(text_.substr(first, last - first + 1));
        json calls = json::array();
        for (const auto& call : rest.calls) calls.push_back(tool_call_json(call));
        message["tool_calls"] = std::move(calls);
        finish_reason = "tool_calls";
      }
    }
    json choice = {{"index", 0}, {"message", std::move(message)}, {"finish_reason", finish_reason}};
    choice["logprobs"] = logprobs_ ? json{{"content", logprob_content_}} : json(nullptr);
    body["choices"] = json::array({std::move(choice)});
    body["usage"] = usage_json(finish.usage);
    return dump_json(body);
  }

 private:
  json header() const { return openai_header(identity_, "chat.completion.chunk"); }

  std::string chunk(json delta, json logprobs, json finish_reason) const {
    return openai_chunk(header(), {{"delta", std::move(delta)}}, std::move(logprobs),
                        std::move(finish_reason), include_usage_);
  }

  ResponseIdentity identity_;
  bool include_usage_;
  bool logprobs_;
  std::unique_ptr<ToolOutput> tools_;  // null: no tool calls possible
  std::string text_;
  json logprob_content_ = json::array();
};

class CompletionFormat : public ResponseFormat {
 public:
  CompletionFormat(ResponseIdentity identity, bool include_usage, bool logprobs)
      : identity_(std::move(identity)), include_usage_(include_usage), logprobs_(logprobs) {}

  std::string stream_delta(const GenerationEvent& delta) override {
    json logprobs = nullptr;
    if (logprobs_) {
      // Each chunk carries only its own tokens, with offsets into the whole text.
      CompletionLogprobs part;
      part.offset = stream_offset_;
      part.add(delta.logprobs);
      stream_offset_ = part.offset;
      logprobs = part.to_json();
    }
    return chunk(delta.text, std::move(logprobs), nullptr);
  }

  std::string stream_end(const GenerationEvent& finish) override {
    return chunk("", nullptr, openai_finish_reason(finish.finish_reason)) +
           openai_stream_tail(header(), include_usage_, finish.usage);
  }

  std::string stream_error(const ApiError& error) override { return openai_error_event(error); }

  void collect(const GenerationEvent& delta) override {
    text_ += delta.text;
    if (logprobs_) logprobs_all_.add(delta.logprobs);
  }

  std::string body(const GenerationEvent& finish) override {
    json body = header();
    json choice = {{"index", 0},
                   {"text", text_},
                   {"finish_reason", openai_finish_reason(finish.finish_reason)}};
    choice["logprobs"] = logprobs_ ? logprobs_all_.to_json() : json(nullptr);
    body["choices"] = json::array({std::move(choice)});
    body["usage"] = usage_json(finish.usage);
    return dump_json(body);
  }

 private:
  json header() const { return openai_header(identity_, "text_completion"); }

  std::string chunk(const std::string& text, json logprobs, json finish_reason) const {
    return openai_chunk(header(), {{"text", text}}, std::move(logprobs), std::move(finish_reason),
                        include_usage_);
  }

  ResponseIdentity identity_;
  bool include_usage_;
  bool logprobs_;
  std::string text_;
  CompletionLogprobs logprobs_all_;
  size_t stream_offset_ = 0;
};

// POST /chat: "event: token" with the raw text (several data: lines when it has newlines),
// then "event: done" with finish reason, usage and timings, or "event: error".
class SimpleChatFormat : public ResponseFormat {
 public:
  explicit SimpleChatFormat(ResponseIdentity identity) : identity_(std::move(identity)) {}

  std::string stream_delta(const GenerationEvent& delta) override {
    return sse_event("token", delta.text);
  }

  std::string stream_end(const GenerationEvent& finish) override {
    return sse_event("done", dump_json(summary(finish)));
  }

  std::string stream_error(const ApiError& error) override {
    return sse_event("error", dump_json(error_json(error)));
  }

  void collect(const GenerationEvent& delta) override { text_ += delta.text; }

  std::string body(const GenerationEvent& finish) override {
    json body = summary(finish);
    body["text"] = text_;
    return dump_json(body);
  }

 private:
  json summary(const GenerationEvent& finish) const {
    return {{"id", identity_.id},
            {"model", identity_.model},
            {"finish_reason", openai_finish_reason(finish.finish_reason)},
            {"usage", usage_json(finish.usage)},
            {"timings", timings_json(finish.usage)}};
  }

  ResponseIdentity identity_;
  std::string text_;
};

}  // namespace

const char* openai_finish_reason(FinishReason reason) {
  return reason == FinishReason::kLength ? "length" : "stop";
}

json usage_json(const Usage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.completion_tokens},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
}

json timings_json(const Usage& usage) {
  return {{"queue_ms", usage.queue_ms},
          {"ttft_ms", usage.ttft_ms},
          {"total_ms", usage.total_ms},
          {"decode_tokens_per_s", usage.decode_tokens_per_s}};
}

std::string dump_json(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::unique_ptr<ResponseFormat> make_chat_completion_format(ResponseIdentity identity,
                                                            bool include_usage, bool logprobs,
                                                            std::unique_ptr<ToolOutput> tools) {
  return std::make_unique<ChatCompletionFormat>(std::move(identity), include_usage, logprobs,
                                                std::move(tools));
}

std::unique_ptr<ResponseFormat> make_completion_format(ResponseIdentity identity,
                                                       bool include_usage, bool logprobs) {
  return std::make_unique<CompletionFormat>(std::move(identity), include_usage, logprobs);
}

std::unique_ptr<ResponseFormat> make_simple_chat_format(ResponseIdentity identity) {
  return std::make_unique<SimpleChatFormat>(std::move(identity));
}

}  // namespace llamaserve::server
