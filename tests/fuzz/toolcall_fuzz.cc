// Model output → tool calls, for every family's syntax, whole and streamed in pieces.
// Properties: no crash or sanitizer report; a call has a name and arguments that are a JSON
// object; when no call is found, the content (streamed content plus the rest) is the input,
// byte for byte: nothing is lost or invented.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "toolcall/call_stream.h"
#include "toolcall/tool_call.h"

namespace {

using llamaserve::toolcall::CallStream;
using llamaserve::toolcall::parse_output;
using llamaserve::toolcall::ParsedOutput;
using llamaserve::toolcall::Syntax;

void check(bool condition) {
  if (!condition) std::abort();
}

void check_calls(const ParsedOutput& out) {
  for (const auto& call : out.calls) {
    check(!call.name.empty() && !call.id.empty());
    const auto arguments = nlohmann::json::parse(call.arguments, nullptr, false);
    check(!arguments.is_discarded() && arguments.is_object());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  // First byte: the piece size of the stream (1..16).
  const size_t piece = (data[0] & 15) + 1;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  for (Syntax syntax :
       {Syntax::kHermes, Syntax::kLlama3, Syntax::kMistral, Syntax::kDeepSeek, Syntax::kGeneric}) {
    const ParsedOutput whole = parse_output(text, syntax);
    check_calls(whole);
    if (whole.calls.empty()) check(whole.content == text);

    CallStream stream(syntax);
    std::string sent;
    for (size_t i = 0; i < text.size(); i += piece) sent += stream.feed(text.substr(i, piece));
    const ParsedOutput rest = stream.finish();
    check_calls(rest);
    if (rest.calls.empty()) check(sent + rest.content == text);
  }
  return 0;
}
