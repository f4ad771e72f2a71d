// The conversation as a model's template should see it when the request has tools.
//   - Earlier calls' arguments (a JSON string on the wire) become objects, as the
//     templates of Hugging Face's convention expect (`arguments | tojson`); DeepSeek's
//     template concatenates them as text and keeps the string.
//   - A template that does not list tools itself gets a system message that describes them
//     and asks for <tool_call> blocks (merged into the conversation's own system message).
//   - A template that does not write earlier calls either gets them written into the
//     assistant's content as <tool_call> blocks, and tool results as user turns holding
//     <tool_response> blocks.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"
#include "toolcall/tool_call.h"

namespace llamaserve::toolcall {

// `tools` is the request's validated array (empty or null: the messages are only converted).
std::vector<ChatMessage> messages_for_template(std::vector<ChatMessage> messages,
                                               const nlohmann::ordered_json& tools,
                                               const TemplateToolSupport& support);

// The system text that describes `tools` for a template that does not list them.
std::string tool_instructions(const nlohmann::ordered_json& tools);

}  // namespace llamaserve::toolcall
