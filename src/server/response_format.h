// How generation events become response bytes, one implementation per endpoint:
// OpenAI chat completions, OpenAI (legacy) completions, and the simple /chat SSE stream.
// Pure formatting: no I/O, no engine, so the shapes are unit-tested directly.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "server/api_error.h"
#include "server/tool_output.h"

namespace llamaserve::server {

struct ResponseIdentity {
  std::string id;       // "chatcmpl-..." / "cmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
};

class ResponseFormat {
 public:
  virtual ~ResponseFormat() = default;

  // Streaming: the bytes to send before the first delta, for each delta, after a normal
  // finish (kStop / kLength; ends with the stream terminator), and when the stream ends in an
  // error after the headers went out.
  virtual std::string stream_begin() { return {}; }
  virtual std::string stream_delta(const GenerationEvent& delta) = 0;
  virtual std::string stream_end(const GenerationEvent& finish) = 0;
  virtual std::string stream_error(const ApiError& error) = 0;

  // Non-streaming: deltas are collected, then the whole JSON body is built at the finish.
  virtual void collect(const GenerationEvent& delta) = 0;
  virtual std::string body(const GenerationEvent& finish) = 0;
};

// "stop" / "length"; other reasons do not reach a normal finish ("tool_calls" is decided by
// the chat format, from the output).
const char* openai_finish_reason(FinishReason reason);
nlohmann::json usage_json(const Usage& usage);
nlohmann::json timings_json(const Usage& usage);
// Serializes without throwing: invalid UTF-8 (which should not occur) becomes U+FFFD.
std::string dump_json(const nlohmann::json& value);

// `tools` (ToolOutput::make; null when the request cannot call tools) turns the model's
// calls into "tool_calls" and the finish reason "tool_calls".
std::unique_ptr<ResponseFormat> make_chat_completion_format(
    ResponseIdentity identity, bool include_usage, bool logprobs,
    std::unique_ptr<ToolOutput> tools = nullptr);
std::unique_ptr<ResponseFormat> make_completion_format(ResponseIdentity identity,
                                                       bool include_usage, bool logprobs);
std::unique_ptr<ResponseFormat> make_simple_chat_format(ResponseIdentity identity);

}  // namespace llamaserve::server
