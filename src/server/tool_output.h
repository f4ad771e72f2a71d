// What becomes of a chat generation's text when the request has tools: with tool_choice
// "auto" the model's own call syntax is parsed out of the stream (toolcall::CallStream);
// with "required" or a named function the output was decoded under the call schema and is
// read as calls at the end. Content goes to the client as it becomes certain.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "server/tool_request.h"
#include "toolcall/call_stream.h"

namespace llamaserve::server {

class ToolOutput {
 public:
  // Null when the request cannot call tools (no tools, or tool_choice "none").
  static std::unique_ptr<ToolOutput> make(const ToolRequest& request, toolcall::Syntax syntax);

  // The content that can be sent now (possibly empty).
  std::string feed(std::string_view text);
  // The content not sent yet, and the calls (one at most unless parallel calls are allowed).
  // An output that was forced into a call but does not parse (cut short by max_tokens) is
  // returned as content.
  toolcall::ParsedOutput finish();

 private:
  ToolOutput(const ToolRequest& request, toolcall::Syntax syntax);

  toolcall::ToolChoice choice_;
  bool forced_;
  bool parallel_calls_;
  std::optional<toolcall::CallStream> stream_;  // not forced
  std::string forced_text_;                     // forced
};

}  // namespace llamaserve::server
