#include "tokenizer/chat_template.h"

#include <algorithm>
#include <initializer_list>

#include <spdlog/spdlog.h>

#include "jinja/template.h"

namespace llamaserve {
namespace {

std::string_view trim(std::string_view text) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const size_t first = text.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(kSpace) - first + 1);
}

bool contains(std::string_view text, std::string_view needle) {
  return text.find(needle) != std::string_view::npos;
}

// A ChatML template with a built-in system prompt has it as a literal, e.g.
//   '<|im_start|>system\nYou are a helpful AI assistant named SmolLM...<|im_end|>\n'
// where \n is a newline or, inside a Jinja string, the two characters '\' 'n'. A literal with
// template syntax between the header and <|im_end|> ('...' + message['content']) is the
// system message itself, not a default.
std::string find_default_system_prompt(std::string_view tmpl) {
  constexpr std::string_view kHeader = "<|im_start|>system";
  constexpr std::string_view kEnd = "<|im_end|>";
  for (size_t at = tmpl.find(kHeader); at != std::string_view::npos;
       at = tmpl.find(kHeader, at + 1)) {
    std::string_view rest = tmpl.substr(at + kHeader.size());
    if (rest.starts_with("\n")) {
      rest.remove_prefix(1);
    } else if (rest.starts_with("\\n")) {
      rest.remove_prefix(2);
    } else {
      continue;
    }
    const size_t end = rest.find(kEnd);
    if (end == std::string_view::npos || end == 0) continue;
    const std::string_view literal = rest.substr(0, end);
    if (literal.find_first_of("'\"{}+") != std::string_view::npos) continue;
    std::string prompt;
    for (size_t i = 0; i < literal.size(); ++i) {
      if (literal[i] == '\\' && i + 1 < literal.size() && literal[i + 1] == 'n') {
        prompt.push_back('\n');
        ++i;
      } else {
        prompt.push_back(literal[i]);
      }
    }
    return prompt;
  }
  return {};
}

Status check_role(const ChatMessage& message, size_t index,
                  std::initializer_list<std::string_view> roles, std::string_view format) {
  if (std::find(roles.begin(), roles.end(), message.role) != roles.end()) return Status::ok();
  std::string expected;
  for (const std::string_view role : roles) {
    expected += expected.empty() ? "" : ", ";
    expected += role;
  }
  return make_error(StatusCode::kInvalidArgument,
                    "message {}: unknown role '{}' for the {} chat format (expected {})", index,
                    message.role, format, expected);
}

// Appends template markup and message contents, recording where the contents lie.
struct PromptBuilder {
  ChatPrompt prompt;
  void markup(std::string_view text) { prompt.text += text; }
  void content(std::string_view text) {
    if (text.empty()) return;
    const size_t begin = prompt.text.size();
    prompt.text += text;
    prompt.content_ranges.push_back({begin, prompt.text.size()});
  }
};

std::string_view trim_end(std::string_view text) {
  const size_t last = text.find_last_not_of(" \t\n\r\f\v");
  return last == std::string_view::npos ? std::string_view() : text.substr(0, last + 1);
}

Result<ChatPrompt> render_llama2(const std::vector<ChatMessage>& messages) {
  PromptBuilder out;
  const ChatMessage* system = nullptr;
  bool at_start = true;  // the tokenizer adds the first <s>
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& message = messages[i];
    LS_RETURN_IF_ERROR(check_role(message, i, {"system", "user", "assistant"}, "llama2"));
    if (message.role == "system") {
      if (i != 0) {
        return make_error(StatusCode::kInvalidArgument,
                          "message {}: the llama2 chat format has a system message only first", i);
      }
      system = &message;
    } else if (message.role == "user") {
      if (!at_start) out.markup("<s>");
      out.markup("[INST] ");
      // The reference template strips "<<SYS>>\n{system}\n<</SYS>>\n\n{user}" as a whole.
      if (system != nullptr) {
        out.markup("<<SYS>>\n");
        out.content(system->content);
        out.markup("\n<</SYS>>\n\n");
        out.content(trim_end(message.content));
        system = nullptr;
      } else {
        out.content(trim(message.content));
      }
      out.markup(" [/INST]");
      at_start = false;
    } else {
      out.markup(" ");
      out.content(trim(message.content));
      out.markup(" </s>");
      at_start = false;
    }
  }
  return std::move(out.prompt);
}

Result<ChatPrompt> render_llama3(const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt) {
  PromptBuilder out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& message = messages[i];
    LS_RETURN_IF_ERROR(
        check_role(message, i, {"system", "user", "assistant", "tool", "ipython"}, "llama3"));
    out.markup("<|start_header_id|>");
    out.markup(message.role);
    out.markup("<|end_header_id|>\n\n");
    out.content(trim(message.content));
    out.markup("<|eot_id|>");
  }
  if (add_generation_prompt) out.markup("<|start_header_id|>assistant<|end_header_id|>\n\n");
  return std::move(out.prompt);
}

Result<ChatPrompt> render_chatml(const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt, const std::string& default_system) {
  PromptBuilder out;
  if (!default_system.empty() && messages.front().role != "system") {
    out.markup("<|im_start|>system\n" + default_system + "<|im_end|>\n");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& message = messages[i];
    LS_RETURN_IF_ERROR(check_role(message, i, {"system", "user", "assistant", "tool"}, "chatml"));
    out.markup("<|im_start|>");
    out.markup(message.role);
    out.markup("\n");
    out.content(message.content);
    out.markup("<|im_end|>\n");
  }
  if (add_generation_prompt) out.markup("<|im_start|>assistant\n");
  return std::move(out.prompt);
}

}  // namespace

Result<ChatTemplate> ChatTemplate::from_name(std::string_view name) {
  if (name == "llama2") return ChatTemplate(ChatTemplateKind::kLlama2, {});
  if (name == "llama3") return ChatTemplate(ChatTemplateKind::kLlama3, {});
  if (name == "chatml") return ChatTemplate(ChatTemplateKind::kChatML, {});
  return make_error(StatusCode::kInvalidArgument,
                    "unknown chat template '{}' (expected llama2, llama3 or chatml)", name);
}

Result<ChatTemplate> ChatTemplate::detect(std::string_view template_text) {
  if (trim(template_text).empty()) {
    return make_error(StatusCode::kNotFound,
                      "the model has no chat template; name one (llama2, llama3 or chatml)");
  }
  if (contains(template_text, "<|im_start|>")) {
    return ChatTemplate(ChatTemplateKind::kChatML, find_default_system_prompt(template_text));
  }
  if (contains(template_text, "<|start_header_id|>"))
    return ChatTemplate(ChatTemplateKind::kLlama3, {});
  if (contains(template_text, "[INST]")) return ChatTemplate(ChatTemplateKind::kLlama2, {});
  return make_error(StatusCode::kUnsupported,
                    "the model's chat template is not one of the known formats; name one "
                    "(llama2, llama3 or chatml)");
}

Result<ChatTemplate> ChatTemplate::from_jinja(std::string_view template_text,
                                              ChatTemplateTokens tokens,
                                              const jinja::RenderLimits& limits) {
  LS_ASSIGN_OR_RETURN(jinja::Template parsed, jinja::Template::parse(template_text));
  ChatTemplate out(ChatTemplateKind::kJinja, {});
  out.jinja_ = std::make_shared<const jinja::Template>(std::move(parsed));
  out.tokens_ = std::move(tokens);
  out.limits_ = limits;
  return out;
}

Result<ChatTemplate> ChatTemplate::for_model(std::string_view template_text,
                                             std::string_view override_name,
                                             ChatTemplateTokens tokens) {
  if (override_name.empty()) {
    if (trim(template_text).empty()) return detect(template_text);
    Result<ChatTemplate> own = from_jinja(template_text, std::move(tokens));
    if (own.is_ok()) return own;
    Result<ChatTemplate> builtin = detect(template_text);
    if (builtin.is_ok()) {
      spdlog::warn("the model's chat template does not parse ({}); using the built-in {} format",
                   own.status().message(), builtin->name());
    }
    return builtin;
  }
  LS_ASSIGN_OR_RETURN(ChatTemplate named, from_name(override_name));
  Result<ChatTemplate> detected = detect(template_text);
  if (detected.is_ok() && detected->kind() == named.kind()) return detected;
  return named;
}

std::string_view ChatTemplate::name() const {
  switch (kind_) {
    case ChatTemplateKind::kLlama2: return "llama2";
    case ChatTemplateKind::kLlama3: return "llama3";
    case ChatTemplateKind::kChatML: return "chatml";
    case ChatTemplateKind::kJinja: return "jinja";
  }
  return "unknown";
}

Result<ChatPrompt> ChatTemplate::render_jinja(const std::vector<ChatMessage>& messages,
                                              bool add_generation_prompt,
                                              const ChatRenderExtras& extras) const {
  nlohmann::ordered_json client = {{"messages", nlohmann::ordered_json::array()},
                                   {"tools", extras.tools}};
  // The roles of the OpenAI API (and Llama 3.1's "ipython" for tool results); a template
  // would render any other word as a role, which no model was trained on.
  for (size_t i = 0; i < messages.size(); ++i) {
    LS_RETURN_IF_ERROR(
        check_role(messages[i], i, {"system", "user", "assistant", "tool", "ipython"}, "jinja"));
  }
  for (const ChatMessage& message : messages) {
    nlohmann::ordered_json m = {{"role", message.role}, {"content", message.content}};
    if (message.fields.is_object()) {
      for (const auto& [key, value] : message.fields.items()) {
        if (key != "role") m[key] = value;
      }
    }
    client["messages"].push_back(std::move(m));
  }
  nlohmann::ordered_json variables =
      extras.variables.is_object() ? extras.variables : nlohmann::ordered_json::object();
  variables["add_generation_prompt"] = add_generation_prompt;
  variables["bos_token"] = tokens_.bos_token;
  variables["eos_token"] = tokens_.eos_token;
  if (!variables.contains("documents")) variables["documents"] = nullptr;
  Result<jinja::RenderOutput> out = jinja_->render(variables, client, limits_);
  if (!out.is_ok()) return out.status().with_context("chat template");
  ChatPrompt prompt;
  prompt.text = std::move(out->text);
  for (const jinja::ByteRange& range : out->client_ranges) {
    prompt.content_ranges.push_back({range.begin, range.end});
  }
  return prompt;
}

Result<ChatPrompt> ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                        bool add_generation_prompt,
                                        const ChatRenderExtras& extras) const {
  if (messages.empty()) {
    return make_error(StatusCode::kInvalidArgument, "a chat needs at least one message");
  }
  switch (kind_) {
    case ChatTemplateKind::kLlama2: return render_llama2(messages);
    case ChatTemplateKind::kLlama3: return render_llama3(messages, add_generation_prompt);
    case ChatTemplateKind::kChatML:
      return render_chatml(messages, add_generation_prompt, default_system_prompt_);
    case ChatTemplateKind::kJinja: return render_jinja(messages, add_generation_prompt, extras);
  }
  return make_error(StatusCode::kInternal, "unhandled chat template kind");
}

}  // namespace llamaserve
