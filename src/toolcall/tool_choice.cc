#include "toolcall/tool_choice.h"

namespace llamaserve::toolcall {
namespace {

using nlohmann::ordered_json;

ordered_json parameters_of(const ordered_json& function) {
  auto parameters = function.find("parameters");
  if (parameters == function.end() || parameters->is_null()) return {{"type", "object"}};
  return *parameters;
}

}  // namespace

ordered_json forced_call_schema(const ordered_json& tools, const ToolChoice& choice,
                                bool parallel_calls) {
  if (choice.kind == ToolChoice::Kind::kFunction) {
    for (const auto& tool : tools) {
      const ordered_json& function = tool.at("function");
      if (function.at("name") == choice.function) return parameters_of(function);
    }
    return {{"type", "object"}};
  }
  ordered_json any_call = ordered_json::array();
  for (const auto& tool : tools) {
    const ordered_json& function = tool.at("function");
    any_call.push_back(
        {{"type", "object"},
         {"properties",
          {{"name", {{"const", function.at("name")}}}, {"arguments", parameters_of(function)}}},
         {"required", {"name", "arguments"}},
         {"additionalProperties", false}});
  }
  ordered_json call = any_call.size() == 1 ? any_call[0] : ordered_json{{"anyOf", any_call}};
  if (!parallel_calls) return call;
  return {{"type", "array"}, {"items", std::move(call)}, {"minItems", 1}};
}

std::vector<ToolCall> parse_forced_output(std::string_view text, const ToolChoice& choice) {
  if (choice.kind == ToolChoice::Kind::kFunction) {
    ordered_json arguments = ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (arguments.is_discarded() || !arguments.is_object()) return {};
    return {ToolCall{new_call_id(), choice.function, arguments.dump()}};
  }
  ParsedOutput parsed = parse_output(text, Syntax::kGeneric);
  if (!parsed.content.empty()) return {};
  return std::move(parsed.calls);
}

}  // namespace llamaserve::toolcall
