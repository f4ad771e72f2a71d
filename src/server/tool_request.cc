#include "server/tool_request.h"

#include <set>

#include <fmt/format.h>

#include "server/json_fields.h"

namespace llamaserve::server {
namespace {

using nlohmann::json;
using toolcall::ToolChoice;

// OpenAI's rule for function names: letters, digits, "_", "-" and "." , at most 64.
bool valid_function_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

Status check_tool(const json& tool, size_t index, std::set<std::string>& names) {
  const std::string at = fmt::format("tools[{}]", index);
  if (!tool.is_object()) return wrong_type(at, "an object", tool);
  const json* type = find_field(tool, "type");
  if (type == nullptr || *type != "function") {
    return Status(StatusCode::kUnsupported,
                  fmt::format("'{}.type' must be \"function\" (the only tool type served)", at));
  }
  const json* function = find_field(tool, "function");
  if (function == nullptr) return invalid(fmt::format("'{}.function' is required", at));
  if (!function->is_object()) return wrong_type(at + ".function", "an object", *function);
  const json* name = find_field(*function, "name");
  if (name == nullptr) return invalid(fmt::format("'{}.function.name' is required", at));
  if (!name->is_string()) return wrong_type(at + ".function.name", "a string", *name);
  const std::string& text = name->get_ref<const std::string&>();
  if (!valid_function_name(text)) {
    return invalid(
        fmt::format("'{}.function.name' must be 1 to 64 letters, digits, '_', '-' or "
                    "'.', got \"{}\"",
                    at, text));
  }
  if (!names.insert(text).second) {
    return invalid(fmt::format("'{}.function.name': \"{}\" is defined twice", at, text));
  }
  if (const json* description = find_field(*function, "description");
      description != nullptr && !description->is_string()) {
    return wrong_type(at + ".function.description", "a string", *description);
  }
  if (const json* parameters = find_field(*function, "parameters");
      parameters != nullptr && !parameters->is_object()) {
    return wrong_type(at + ".function.parameters", "an object (a JSON Schema)", *parameters);
  }
  if (const json* strict = find_field(*function, "strict");
      strict != nullptr && !strict->is_boolean()) {
    return wrong_type(at + ".function.strict", "a boolean", *strict);
  }
  return Status::ok();
}

Status read_tool_choice(const json& body, const std::set<std::string>& names, ToolChoice& out) {
  const json* choice = find_field(body, "tool_choice");
  if (choice == nullptr) {
    out.kind = names.empty() ? ToolChoice::Kind::kNone : ToolChoice::Kind::kAuto;
    return Status::ok();
  }
  if (choice->is_string()) {
    const std::string& text = choice->get_ref<const std::string&>();
    if (text == "none") {
      out.kind = ToolChoice::Kind::kNone;
      return Status::ok();
    }
    if (text == "auto") {
      out.kind = ToolChoice::Kind::kAuto;
    } else if (text == "required") {
      out.kind = ToolChoice::Kind::kRequired;
    } else {
      return invalid(fmt::format(
          "'tool_choice' must be \"none\", \"auto\", \"required\" or {{\"type\": \"function\", "
          "\"function\": {{\"name\": ...}}}}, got \"{}\"",
          text));
    }
  } else if (choice->is_object()) {
    const json* type = find_field(*choice, "type");
    const json* function = find_field(*choice, "function");
    const json* name =
        function != nullptr && function->is_object() ? find_field(*function, "name") : nullptr;
    if (type == nullptr || *type != "function" || name == nullptr || !name->is_string()) {
      return invalid(
          "'tool_choice' as an object must be {\"type\": \"function\", \"function\": {\"name\": "
          "\"<one of the tools>\"}}");
    }
    out.kind = ToolChoice::Kind::kFunction;
    out.function = name->get<std::string>();
    if (!names.empty() && !names.contains(out.function)) {
      return invalid(
          fmt::format("'tool_choice.function.name': \"{}\" is not among 'tools'", out.function));
    }
  } else {
    return wrong_type("tool_choice", "a string or an object", *choice);
  }
  if (names.empty()) return invalid("'tool_choice' needs 'tools' to choose from");
  return Status::ok();
}

}  // namespace

Status read_tool_request(const json& body, ToolRequest& out) {
  std::set<std::string> names;
  if (const json* tools = find_field(body, "tools")) {
    if (!tools->is_array()) return wrong_type("tools", "an array", *tools);
    if (tools->size() > kMaxTools) {
      return invalid(
          fmt::format("'tools' may hold at most {} tools, got {}", kMaxTools, tools->size()));
    }
    for (size_t i = 0; i < tools->size(); ++i) {
      LS_RETURN_IF_ERROR(check_tool((*tools)[i], i, names));
    }
    if (!tools->empty()) out.tools = nlohmann::ordered_json::parse(tools->dump());
  }
  LS_RETURN_IF_ERROR(read_tool_choice(body, names, out.choice));
  LS_RETURN_IF_ERROR(read_bool(body, "parallel_tool_calls", out.parallel_calls));
  return Status::ok();
}

}  // namespace llamaserve::server
