#include "toolcall/tool_call.h"

#include <optional>
#include <random>

#include <nlohmann/json.hpp>

namespace llamaserve::toolcall {
namespace {

using nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralTag = "[TOOL_CALLS]";
constexpr std::string_view kDeepSeekCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kDeepSeekCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kDeepSeekCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kDeepSeekCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kDeepSeekSep = "<｜tool▁sep｜>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string_view trim(std::string_view text) {
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return text;
}

// The length of the JSON object or array that starts at text[0] (brackets balanced outside
// strings), or npos when it does not close. Only finds the extent; nlohmann parses.
size_t json_extent(std::string_view text) {
  if (text.empty() || (text[0] != '{' && text[0] != '[')) return std::string_view::npos;
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

std::optional<ordered_json> parse_json(std::string_view text) {
  ordered_json value = ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) return std::nullopt;
  return value;
}

// {"name": "f", "arguments" | "parameters": {...} or "{...}", "id"?}; also OpenAI's own
// {"type": "function", "function": {...}} shape.
std::optional<ToolCall> call_from_json(const ordered_json& value) {
  if (!value.is_object()) return std::nullopt;
  if (auto function = value.find("function"); function != value.end() && function->is_object()) {
    auto call = call_from_json(*function);
    if (call && value.contains("id") && value["id"].is_string()) call->id = value["id"];
    return call;
  }
  auto name = value.find("name");
  if (name == value.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) {
    return std::nullopt;
  }
  ToolCall call;
  call.name = *name;
  auto arguments = value.find("arguments");
  if (arguments == value.end()) arguments = value.find("parameters");
  if (arguments == value.end() || arguments->is_null()) {
    call.arguments = "{}";
  } else if (arguments->is_object()) {
    call.arguments = arguments->dump();
  } else if (arguments->is_string()) {
    // Some models write the arguments as a JSON string, as OpenAI's wire format does.
    auto inner = parse_json(arguments->get_ref<const std::string&>());
    if (!inner || !inner->is_object()) return std::nullopt;
    call.arguments = inner->dump();
  } else {
    return std::nullopt;
  }
  if (auto id = value.find("id"); id != value.end() && id->is_string()) call.id = *id;
  return call;
}

// A JSON object (one call) or array of objects (several); nullopt when any is not a call.
std::optional<std::vector<ToolCall>> calls_from_json(std::string_view text) {
  auto value = parse_json(text);
  if (!value) return std::nullopt;
  std::vector<ToolCall> calls;
  if (value->is_array()) {
    if (value->empty()) return std::nullopt;
    for (const auto& item : *value) {
      auto call = call_from_json(item);
      if (!call) return std::nullopt;
      calls.push_back(std::move(*call));
    }
  } else {
    auto call = call_from_json(*value);
    if (!call) return std::nullopt;
    calls.push_back(std::move(*call));
  }
  return calls;
}

// JSON values back to back, separated by white space or ";" (LLaMA 3's several calls).
// Control tokens' text between or after them ("<|eom_id|>" where a vocabulary does not mark it
// as end of generation) is skipped.
std::optional<std::vector<ToolCall>> calls_from_json_sequence(std::string_view text) {
  std::vector<ToolCall> calls;
  text = trim(text);
  while (!text.empty()) {
    if (text.starts_with("<|")) {
      const size_t end = text.find("|>");
      if (end == std::string_view::npos) return std::nullopt;
      text = trim(text.substr(end + 2));
      continue;
    }
    const size_t end = json_extent(text);
    if (end == std::string_view::npos) return std::nullopt;
    auto more = calls_from_json(text.substr(0, end));
    if (!more) return std::nullopt;
    for (auto& call : *more) calls.push_back(std::move(call));
    text = trim(text.substr(end));
    if (!text.empty() && text.front() == ';') text = trim(text.substr(1));
  }
  if (calls.empty()) return std::nullopt;
  return calls;
}

// <tool_call> blocks anywhere in the text; the closing tag of the last may be missing (the
// model stopped on it as a stop string, or at its end-of-turn token).
std::optional<ParsedOutput> parse_hermes(std::string_view text) {
  if (text.find(kHermesOpen) == std::string_view::npos) return std::nullopt;
  ParsedOutput out;
  std::string content;
  while (!text.empty()) {
    const size_t open = text.find(kHermesOpen);
    if (open == std::string_view::npos) {
      content.append(text);
      break;
    }
    content.append(text.substr(0, open));
    text.remove_prefix(open + kHermesOpen.size());
    const size_t close = text.find(kHermesClose);
    auto calls = calls_from_json_sequence(text.substr(0, close));
    if (!calls) return std::nullopt;
    for (auto& call : *calls) out.calls.push_back(std::move(call));
    text = close == std::string_view::npos ? std::string_view()
                                           : text.substr(close + kHermesClose.size());
  }
  out.content = trim(content);
  return out;
}

// Text, then a marker, then calls to the end (LLaMA 3's python tag, Mistral's [TOOL_CALLS]).
std::optional<ParsedOutput> parse_after_marker(std::string_view text, std::string_view marker) {
  const size_t at = text.find(marker);
  if (at == std::string_view::npos) return std::nullopt;
  auto calls = calls_from_json_sequence(text.substr(at + marker.size()));
  if (!calls) return std::nullopt;
  return ParsedOutput{std::string(trim(text.substr(0, at))), std::move(*calls)};
}

std::optional<ParsedOutput> parse_deepseek(std::string_view text) {
  const size_t begin = text.find(kDeepSeekCallsBegin);
  if (begin == std::string_view::npos) return std::nullopt;
  ParsedOutput out;
  out.content = trim(text.substr(0, begin));
  std::string_view rest = text.substr(begin + kDeepSeekCallsBegin.size());
  rest = rest.substr(0, rest.find(kDeepSeekCallsEnd));
  while (!trim(rest).empty()) {
    rest = trim(rest);
    if (rest.substr(0, kDeepSeekCallBegin.size()) != kDeepSeekCallBegin) return std::nullopt;
    rest.remove_prefix(kDeepSeekCallBegin.size());
    const size_t end = rest.find(kDeepSeekCallEnd);
    std::string_view call_text = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view()
                                         : rest.substr(end + kDeepSeekCallEnd.size());
    // function<｜tool▁sep｜>NAME\n```json\n{...}\n```
    const size_t sep = call_text.find(kDeepSeekSep);
    if (sep == std::string_view::npos) return std::nullopt;
    call_text.remove_prefix(sep + kDeepSeekSep.size());
    const size_t newline = call_text.find('\n');
    if (newline == std::string_view::npos) return std::nullopt;
    ToolCall call;
    call.name = trim(call_text.substr(0, newline));
    std::string_view body = trim(call_text.substr(newline + 1));
    if (body.starts_with("```json"))
      body.remove_prefix(7);
    else if (body.starts_with("```"))
      body.remove_prefix(3);
    if (body.ends_with("```")) body.remove_suffix(3);
    auto arguments = parse_json(trim(body));
    if (call.name.empty() || !arguments || !arguments->is_object()) return std::nullopt;
    call.arguments = arguments->dump();
    out.calls.push_back(std::move(call));
  }
  if (out.calls.empty()) return std::nullopt;
  return out;
}

// The whole output is a call (or calls) in JSON, nothing else.
std::optional<ParsedOutput> parse_bare_json(std::string_view text) {
  auto calls = calls_from_json_sequence(text);
  if (!calls) return std::nullopt;
  return ParsedOutput{{}, std::move(*calls)};
}

std::optional<ParsedOutput> parse_family(std::string_view text, Syntax syntax) {
  switch (syntax) {
    case Syntax::kLlama3: return parse_after_marker(text, kPythonTag);
    case Syntax::kMistral: return parse_after_marker(text, kMistralTag);
    case Syntax::kDeepSeek: return parse_deepseek(text);
    case Syntax::kHermes:
    case Syntax::kGeneric: return parse_hermes(text);
  }
  return std::nullopt;
}

}  // namespace

const char* syntax_name(Syntax syntax) {
  switch (syntax) {
    case Syntax::kHermes: return "hermes";
    case Syntax::kLlama3: return "llama3";
    case Syntax::kMistral: return "mistral";
    case Syntax::kDeepSeek: return "deepseek";
    case Syntax::kGeneric: return "generic";
  }
  return "generic";
}

TemplateToolSupport detect_tool_support(std::string_view template_text) {
  TemplateToolSupport support;
  const auto has = [&](std::string_view marker) {
    return template_text.find(marker) != std::string_view::npos;
  };
  if (has(kDeepSeekCallsBegin)) {
    support.syntax = Syntax::kDeepSeek;
  } else if (has(kMistralTag)) {
    support.syntax = Syntax::kMistral;
  } else if (has(kHermesOpen)) {
    support.syntax = Syntax::kHermes;
  } else if (has(kPythonTag) || has("\"parameters\": dictionary of argument name")) {
    support.syntax = Syntax::kLlama3;
  }
  // A template that reads `tools` lists them; one that reads `tool_calls` writes the calls of
  // earlier turns (and, by the families' conventions, their results).
  support.renders_tools = has("tools");
  support.renders_tool_calls = has("tool_calls");
  return support;
}

ParsedOutput parse_output(std::string_view text, Syntax syntax) {
  std::optional<ParsedOutput> parsed = parse_family(text, syntax);
  if (!parsed && syntax != Syntax::kHermes && syntax != Syntax::kGeneric)
    parsed = parse_hermes(text);
  if (!parsed) parsed = parse_bare_json(text);
  if (!parsed) return ParsedOutput{std::string(text), {}};
  for (ToolCall& call : parsed->calls) {
    if (call.id.empty()) call.id = new_call_id();
  }
  return std::move(*parsed);
}

std::vector<std::string_view> call_markers(Syntax syntax) {
  switch (syntax) {
    case Syntax::kLlama3: return {kHermesOpen, kPythonTag};
    case Syntax::kMistral: return {kHermesOpen, kMistralTag};
    case Syntax::kDeepSeek: return {kHermesOpen, kDeepSeekCallsBegin};
    case Syntax::kHermes:
    case Syntax::kGeneric: break;
  }
  return {kHermesOpen};
}

std::string new_call_id() {
  static constexpr std::string_view kAlphabet =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 generator{std::random_device{}()};
  std::uniform_int_distribution<size_t> pick(0, kAlphabet.size() - 1);
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlphabet[pick(generator)];
  return id;
}

}  // namespace llamaserve::toolcall
