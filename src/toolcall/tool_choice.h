// `tool_choice` and the output it forces. "required" and a named function are decoded under a
// JSON Schema built from the tools' `parameters` (structured output, grammar/), so the call
// is valid by construction; the output is then that JSON, not the model's own call syntax.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "toolcall/tool_call.h"

namespace llamaserve::toolcall {

struct ToolChoice {
  enum class Kind {
    kAuto,      // the model decides; its output is parsed in its syntax (call_stream.h)
    kNone,      // no calls: the tools are not shown to the model
    kRequired,  // at least one call (exactly one unless parallel calls are allowed)
    kFunction,  // one call of `function`
  } kind = Kind::kAuto;
  std::string function;  // kFunction
};

// The schema the output must match for kRequired / kFunction. `tools` is the request's
// array of {"type": "function", "function": {"name", "parameters"?}}, already validated.
//   kFunction: the function's parameters (its arguments object; {"type": "object"} when it
//              has none)
//   kRequired: {"name": const, "arguments": parameters} for any of the tools; an array of
//              one or more of those when parallel calls are allowed
nlohmann::ordered_json forced_call_schema(const nlohmann::ordered_json& tools,
                                          const ToolChoice& choice, bool parallel_calls);

// The calls in an output decoded under forced_call_schema. Empty when it does not parse (a
// generation cut short by max_tokens).
std::vector<ToolCall> parse_forced_output(std::string_view text, const ToolChoice& choice);

}  // namespace llamaserve::toolcall
