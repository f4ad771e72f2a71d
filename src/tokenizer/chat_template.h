// Chat prompt formats, without a Jinja engine: the model's tokenizer.chat_template is only
// recognised (by marker substrings) as one of the formats below, which are written out here.
//
//   kLlama2  [INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s><s>[INST] ...
//   kLlama3  <|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|> ...
//   kChatML  <|im_start|>{role}\n{content}<|im_end|>\n ...
//
// The result never starts with BOS. Turn it into ids with encode_chat_prompt
// (prompt_builder.h): it adds BOS where the model wants one and makes only the template's
// markup control tokens, control-token text inside messages staying plain text. Content is
// trimmed for Llama 2 and Llama 3, as their reference templates do; ChatML keeps it verbatim.
// A ChatML template that inserts a system prompt when the conversation has none (SmolLM2,
// Qwen2) is detected and that prompt reproduced.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace llamaserve {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" (and "tool" where the format has it)
  std::string content;
};

enum class ChatTemplateKind { kLlama2, kLlama3, kChatML };

// A rendered prompt and where in it the message contents (client text) lie; hand both to
// Tokenizer::encode_guarded so that only the template's own markup becomes control tokens.
struct ChatPrompt {
  std::string text;
  std::vector<TextRange> content_ranges;  // sorted, non-overlapping
};

class ChatTemplate {
 public:
  // "llama2", "llama3" or "chatml" (no default system prompt).
  static Result<ChatTemplate> from_name(std::string_view name);
  // Recognises a tokenizer.chat_template text; kNotFound when it is empty, kUnsupported when
  // no known format's markers are in it.
  static Result<ChatTemplate> detect(std::string_view template_text);
  // The named format when override_name is non-empty (keeping the detected default system
  // prompt when the model's template is of that same format), otherwise detect().
  static Result<ChatTemplate> for_model(std::string_view template_text,
                                        std::string_view override_name = {});

  ChatTemplateKind kind() const { return kind_; }
  std::string_view name() const;
  // Empty when the format adds none.
  const std::string& default_system_prompt() const { return default_system_prompt_; }

  // The prompt text for `messages` and where their contents lie in it; with
  // add_generation_prompt it ends where the assistant's reply begins (Llama 2's prompt always
  // ends with [/INST], so the flag changes nothing there). kInvalidArgument for no messages,
  // an unknown role, or (Llama 2) a system message that is not the first.
  Result<ChatPrompt> render(const std::vector<ChatMessage>& messages,
                            bool add_generation_prompt) const;

 private:
  ChatTemplate(ChatTemplateKind kind, std::string default_system_prompt)
      : kind_(kind), default_system_prompt_(std::move(default_system_prompt)) {}

  ChatTemplateKind kind_;
  std::string default_system_prompt_;
};

}  // namespace llamaserve
