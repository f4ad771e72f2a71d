// Chat prompt formats. A model's own tokenizer.chat_template is rendered by the Jinja engine
// (src/jinja/, kJinja) with Hugging Face's conventions: `messages`, `tools`,
// `add_generation_prompt`, `bos_token`, `eos_token`, `raise_exception`, `strftime_now`. Three
// formats are also written out here, selectable by name and used when the model has no
// template or its template does not parse (the text is then recognised by marker substrings):
//
//   kLlama2  [INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s><s>[INST] ...
//   kLlama3  <|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|> ...
//   kChatML  <|im_start|>{role}\n{content}<|im_end|>\n ...
//
// The built-in formats never start with BOS; a model's template often writes bos_token itself,
// and encode_chat_prompt then does not add a second one. Turn it into ids with encode_chat_prompt
// (prompt_builder.h): it adds BOS where the model wants one and makes only the template's
// markup control tokens, control-token text inside messages staying plain text. Content is
// trimmed for Llama 2 and Llama 3, as their reference templates do; ChatML keeps it verbatim.
// A ChatML template that inserts a system prompt when the conversation has none (SmolLM2,
// Qwen2) is detected and that prompt reproduced.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "jinja/evaluator.h"
#include "tokenizer/tokenizer.h"

namespace llamaserve {

namespace jinja {
class Template;
}

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" (and "tool" where the format has it)
  std::string content;
  // Further fields of the message as the client sent them (tool_calls, tool_call_id, name; a
  // null "content" of an assistant turn that only calls tools), an object or null. Only a
  // model's own template sees them; the built-in formats ignore them.
  nlohmann::ordered_json fields = nullptr;
};

// What a model's own template gets besides the messages.
struct ChatRenderExtras {
  nlohmann::ordered_json tools = nullptr;  // the request's tool definitions (client text)
  // Further variables (enable_thinking, date_string...), trusted like the template.
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();
};

// The special tokens' text that a model's template refers to as bos_token and eos_token.
struct ChatTemplateTokens {
  std::string bos_token;
  std::string eos_token;
};

enum class ChatTemplateKind { kLlama2, kLlama3, kChatML, kJinja };

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
  // The model's own template, rendered by the Jinja engine. kInvalidArgument (with the line)
  // when it does not parse.
  static Result<ChatTemplate> from_jinja(std::string_view template_text, ChatTemplateTokens tokens,
                                         const jinja::RenderLimits& limits = {});
  // The named format when override_name is non-empty (keeping the detected default system
  // prompt when the model's template is of that same format); otherwise the model's own
  // template (from_jinja), or, when that does not parse (logged as a warning), detect().
  static Result<ChatTemplate> for_model(std::string_view template_text,
                                        std::string_view override_name = {},
                                        ChatTemplateTokens tokens = {});

  ChatTemplateKind kind() const { return kind_; }
  std::string_view name() const;
  // Empty when the format adds none.
  const std::string& default_system_prompt() const { return default_system_prompt_; }

  // The prompt text for `messages` and where their contents lie in it; with
  // add_generation_prompt it ends where the assistant's reply begins (Llama 2's prompt always
  // ends with [/INST], so the flag changes nothing there). kInvalidArgument for no messages,
  // an unknown role, or (Llama 2) a system message that is not the first; for kJinja, for
  // whatever the template refuses (raise_exception's message) or fails on, and for a render
  // past the engine's limits, "chat template: <message> (line N)".
  Result<ChatPrompt> render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                            const ChatRenderExtras& extras = {}) const;

 private:
  ChatTemplate(ChatTemplateKind kind, std::string default_system_prompt)
      : kind_(kind), default_system_prompt_(std::move(default_system_prompt)) {}

  Result<ChatPrompt> render_jinja(const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt, const ChatRenderExtras& extras) const;

  ChatTemplateKind kind_;
  std::string default_system_prompt_;
  std::shared_ptr<const jinja::Template> jinja_;  // kJinja
  ChatTemplateTokens tokens_;
  jinja::RenderLimits limits_;
};

}  // namespace llamaserve
