// The tool fields of a chat completion request: "tools", "tool_choice" and
// "parallel_tool_calls", checked against OpenAI's shapes so that a malformed definition is a
// 400 that names it instead of a template error or a silent no-call.
#pragma once

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "toolcall/tool_choice.h"

namespace llamaserve::server {

struct ToolRequest {
  // [{"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}],
  // as the client wrote it (key order kept for the template); null when absent or empty.
  nlohmann::ordered_json tools = nullptr;
  toolcall::ToolChoice choice;  // auto by default (none when there are no tools)
  bool parallel_calls = true;

  // The model may call tools and its output is parsed for calls.
  bool calls_enabled() const {
    return tools.is_array() && choice.kind != toolcall::ToolChoice::Kind::kNone;
  }
  // The output is forced into a call (tool_choice "required" or a named function).
  bool forced() const {
    return calls_enabled() && (choice.kind == toolcall::ToolChoice::Kind::kRequired ||
                               choice.kind == toolcall::ToolChoice::Kind::kFunction);
  }
};

// At most this many tools per request (OpenAI's limit).
inline constexpr size_t kMaxTools = 128;

Status read_tool_request(const nlohmann::json& body, ToolRequest& out);

}  // namespace llamaserve::server
