#include "toolcall/tool_prompt.h"

namespace llamaserve::toolcall {
namespace {

using nlohmann::ordered_json;

// tool_calls[k].function.arguments as an object where it is a JSON object's text.
void arguments_as_objects(ChatMessage& message) {
  if (!message.fields.is_object()) return;
  auto calls = message.fields.find("tool_calls");
  if (calls == message.fields.end() || !calls->is_array()) return;
  for (auto& call : *calls) {
    if (!call.is_object()) continue;
    auto function = call.find("function");
    if (function == call.end() || !function->is_object()) continue;
    auto arguments = function->find("arguments");
    if (arguments == function->end() || !arguments->is_string()) continue;
    ordered_json parsed = ordered_json::parse(arguments->get_ref<const std::string&>(), nullptr,
                                              /*allow_exceptions=*/false);
    if (!parsed.is_discarded() && parsed.is_object()) *arguments = std::move(parsed);
  }
}

// An assistant turn's calls as <tool_call> blocks after its text.
std::string calls_as_text(const ChatMessage& message) {
  std::string text = message.content;
  if (!message.fields.is_object()) return text;
  auto calls = message.fields.find("tool_calls");
  if (calls == message.fields.end() || !calls->is_array()) return text;
  for (const auto& call : *calls) {
    const ordered_json function = call.value("function", ordered_json::object());
    ordered_json arguments = function.value("arguments", ordered_json::object());
    if (arguments.is_string()) {
      ordered_json parsed = ordered_json::parse(arguments.get_ref<const std::string&>(), nullptr,
                                                /*allow_exceptions=*/false);
      if (!parsed.is_discarded()) arguments = std::move(parsed);
    }
    if (!text.empty()) text += '\n';
    text += "<tool_call>\n";
    text += ordered_json{{"name", function.value("name", "")}, {"arguments", arguments}}.dump();
    text += "\n</tool_call>";
  }
  return text;
}

}  // namespace

std::string tool_instructions(const ordered_json& tools) {
  std::string text =
      "You can call functions to answer. They are described here, one JSON object per line:\n"
      "<tools>\n";
  for (const auto& tool : tools) {
    text += tool.contains("function") ? tool["function"].dump() : tool.dump();
    text += '\n';
  }
  text +=
      "</tools>\n"
      "To call a function, answer with one block per call and nothing else:\n"
      "<tool_call>\n"
      "{\"name\": \"<function name>\", \"arguments\": {<arguments as JSON>}}\n"
      "</tool_call>\n"
      "The results come back in <tool_response> blocks. When no function helps, answer "
      "directly.";
  return text;
}

std::vector<ChatMessage> messages_for_template(std::vector<ChatMessage> messages,
                                               const ordered_json& tools,
                                               const TemplateToolSupport& support) {
  if (support.syntax != Syntax::kDeepSeek) {
    for (ChatMessage& message : messages) arguments_as_objects(message);
  }
  if (!support.renders_tool_calls) {
    for (ChatMessage& message : messages) {
      if (message.role == "assistant") {
        message.content = calls_as_text(message);
        message.fields = nullptr;
      } else if (message.role == "tool") {
        message.role = "user";
        message.content = "<tool_response>\n" + message.content + "\n</tool_response>";
        message.fields = nullptr;
      }
    }
  }
  if (!support.renders_tools && tools.is_array() && !tools.empty()) {
    const std::string instructions = tool_instructions(tools);
    if (!messages.empty() && messages.front().role == "system") {
      messages.front().content += "\n\n" + instructions;
    } else {
      messages.insert(messages.begin(), ChatMessage{"system", instructions, nullptr});
    }
  }
  return messages;
}

}  // namespace llamaserve::toolcall
