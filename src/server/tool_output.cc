#include "server/tool_output.h"

namespace llamaserve::server {

std::unique_ptr<ToolOutput> ToolOutput::make(const ToolRequest& request, toolcall::Syntax syntax) {
  if (!request.calls_enabled()) return nullptr;
  return std::unique_ptr<ToolOutput>(new ToolOutput(request, syntax));
}

ToolOutput::ToolOutput(const ToolRequest& request, toolcall::Syntax syntax)
    : choice_(request.choice), forced_(request.forced()), parallel_calls_(request.parallel_calls) {
  if (!forced_) stream_.emplace(syntax);
}

std::string ToolOutput::feed(std::string_view text) {
  if (!forced_) return stream_->feed(text);
  forced_text_.append(text);
  return {};
}

toolcall::ParsedOutput ToolOutput::finish() {
  toolcall::ParsedOutput out;
  if (forced_) {
    out.calls = toolcall::parse_forced_output(forced_text_, choice_);
    if (out.calls.empty()) out.content = std::move(forced_text_);
  } else {
    out = stream_->finish();
  }
  if (!parallel_calls_ && out.calls.size() > 1) out.calls.resize(1);
  return out;
}

}  // namespace llamaserve::server
