#include "server/request_parser.h"

#include <cmath>
#include <cstdlib>
#include <limits>

#include "server/json_fields.h"
#include "server/utf8.h"

namespace llamaserve::server {
namespace {

using nlohmann::json;

// nlohmann's parser is iterative, but nested values are still costly to build and walk;
// nothing valid here nests deeper than a few levels.
constexpr int kMaxJsonDepth = 64;

Status read_seed(const json& object, std::string_view key, std::optional<uint64_t>& out) {
  const json* value = find_field(object, key);
  if (value == nullptr) return Status::ok();
  if (!value->is_number_integer()) return wrong_type(key, "an integer", *value);
  // Negative seeds are accepted (OpenAI's type is a plain integer) and reinterpreted.
  out = value->is_number_unsigned() ? value->get<uint64_t>()
                                    : static_cast<uint64_t>(value->get<int64_t>());
  return Status::ok();
}

Status read_stop(const json& object, std::string_view key, const ParseLimits& limits,
                 std::vector<std::string>& out) {
  const json* value = find_field(object, key);
  if (value == nullptr) return Status::ok();
  auto add = [&out](const std::string& stop) {
    if (!stop.empty()) out.push_back(stop);  // an empty stop string would match everywhere
  };
  if (value->is_string()) {
    add(value->get<std::string>());
    return Status::ok();
  }
  if (!value->is_array()) return wrong_type(key, "a string or an array of strings", *value);
  if (value->size() > static_cast<size_t>(limits.max_stop_strings)) {
    return invalid(fmt::format("'{}' may hold at most {} strings, got {}", key,
                               limits.max_stop_strings, value->size()));
  }
  for (size_t i = 0; i < value->size(); ++i) {
    const json& item = (*value)[i];
    if (!item.is_string()) return wrong_type(fmt::format("{}[{}]", key, i), "a string", item);
    add(item.get<std::string>());
  }
  return Status::ok();
}

// OpenAI accepts top_p = 0: nucleus sampling that keeps only the most likely token, which is
// greedy decoding (the engine itself wants top_p in (0, 1]).
void greedy_if_top_p_zero(SamplingParams& sampling) {
  if (sampling.top_p == 0.0f) {
    sampling.temperature = 0.0f;
    sampling.top_p = 1.0f;
  }
}

// The OpenAI sampling fields shared by chat and completions (snake_case names).
Status read_openai_sampling(const json& body, ParsedGeneration& out) {
  SamplingParams& s = out.sampling;
  LS_RETURN_IF_ERROR(read_float(body, "temperature", {0.0, 2.0}, s.temperature));
  LS_RETURN_IF_ERROR(read_float(body, "top_p", {0.0, 1.0}, s.top_p));
  greedy_if_top_p_zero(s);
  std::optional<int64_t> top_k;
  LS_RETURN_IF_ERROR(read_int(body, "top_k", 0, std::numeric_limits<int32_t>::max(), top_k));
  if (top_k) s.top_k = static_cast<int32_t>(*top_k);
  LS_RETURN_IF_ERROR(read_float(body, "min_p", {0.0, 1.0}, s.min_p));
  LS_RETURN_IF_ERROR(read_float(body, "presence_penalty", {-2.0, 2.0}, s.presence_penalty));
  LS_RETURN_IF_ERROR(read_float(body, "frequency_penalty", {-2.0, 2.0}, s.frequency_penalty));
  LS_RETURN_IF_ERROR(
      read_float(body, "repetition_penalty", {0.0, 10.0, true}, s.repetition_penalty));
  LS_RETURN_IF_ERROR(read_seed(body, "seed", s.seed));
  return Status::ok();
}

Status read_response_format(const json& body, ResponseFormatSpec& out) {
  const json* format = find_field(body, "response_format");
  if (format == nullptr) return Status::ok();
  if (!format->is_object()) return wrong_type("response_format", "an object", *format);
  const json* type = find_field(*format, "type");
  if (type == nullptr) return invalid("'response_format.type' is required");
  if (!type->is_string()) return wrong_type("response_format.type", "a string", *type);
  const std::string& kind = type->get_ref<const std::string&>();
  if (kind != "text" && kind != "json_object" && kind != "json_schema") {
    return invalid(fmt::format(
        "'response_format.type' must be one of text, json_object, json_schema; got \"{}\"", kind));
  }
  // Checked whenever it is there, even when the type does not use it.
  const json* spec = find_field(*format, "json_schema");
  if (spec == nullptr) {
    if (kind == "json_schema") return invalid("'response_format.json_schema' is required");
    if (kind == "json_object") out.kind = ResponseFormatSpec::Kind::kJsonObject;
    return Status::ok();
  }
  if (!spec->is_object()) return wrong_type("response_format.json_schema", "an object", *spec);
  LS_RETURN_IF_ERROR(read_string(*spec, "name", out.name));
  if (out.name.size() > 64 ||
      out.name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"
                                 "KLMNOPQRSTUVWXYZ0123456789_-") != std::string::npos) {
    return invalid(
        "'response_format.json_schema.name' must be at most 64 of a-z, A-Z, 0-9, _ and -");
  }
  LS_RETURN_IF_ERROR(read_bool(*spec, "strict", out.strict));
  std::string description;
  LS_RETURN_IF_ERROR(read_string(*spec, "description", description));
  const json* schema = find_field(*spec, "schema");
  if (schema == nullptr) return invalid("'response_format.json_schema.schema' is required");
  if (!schema->is_object()) {
    return wrong_type("response_format.json_schema.schema", "an object", *schema);
  }
  if (kind == "json_schema") {
    out.kind = ResponseFormatSpec::Kind::kJsonSchema;
  } else if (kind == "json_object") {
    out.kind = ResponseFormatSpec::Kind::kJsonObject;
  }
  return Status::ok();
}

Status read_max_tokens(const json& body, std::string_view key, const ParseLimits& limits,
                       std::optional<int32_t>& out) {
  std::optional<int64_t> value;
  LS_RETURN_IF_ERROR(
      read_int(body, key, 1, limits.max_tokens_limit, value, " (the server's --max-tokens-limit)"));
  if (value) out = static_cast<int32_t>(*value);
  return Status::ok();
}

// "keep_alive" as Ollama takes it: seconds as a number, or a duration "30s", "5m", "2h";
// negative keeps the model loaded for good (0 ms here).
Status read_keep_alive(const json& body, std::optional<int64_t>& out_ms) {
  const json* value = find_field(body, "keep_alive");
  if (value == nullptr) return Status::ok();
  constexpr double kMaxSeconds = 365.0 * 24 * 3600;
  double seconds = 0;
  if (value->is_number()) {
    seconds = value->get<double>();
  } else if (value->is_string()) {
    const std::string& text = value->get_ref<const std::string&>();
    char* end = nullptr;
    seconds = std::strtod(text.c_str(), &end);
    const std::string_view unit(end);
    if (end == text.c_str() || !(unit == "s" || unit == "m" || unit == "h" || unit.empty())) {
      return invalid(fmt::format("'keep_alive' must be seconds or a duration like \"5m\", got {}",
                                 value->dump()));
    }
    seconds *= unit == "m" ? 60 : unit == "h" ? 3600 : 1;
  } else {
    return wrong_type("keep_alive", "a number of seconds or a duration string", *value);
  }
  if (!std::isfinite(seconds) || seconds > kMaxSeconds) {
    return invalid("'keep_alive' must be at most a year");
  }
  out_ms = seconds < 0 ? 0 : std::max<int64_t>(1, static_cast<int64_t>(seconds * 1000));
  return Status::ok();
}

// Fields every OpenAI generation request shares: model, keep_alive, n, stream,
// stream_options, stop, user, sampling, max_tokens / max_completion_tokens.
Status read_openai_common(const json& body, const ParseLimits& limits, ParsedGeneration& out) {
  LS_RETURN_IF_ERROR(read_string(body, "model", out.model));
  LS_RETURN_IF_ERROR(read_keep_alive(body, out.keep_alive_ms));
  std::optional<int64_t> n;
  LS_RETURN_IF_ERROR(read_int(body, "n", std::numeric_limits<int64_t>::min(),
                              std::numeric_limits<int64_t>::max(), n));
  if (n && *n != 1) {
    return invalid(fmt::format("'n' must be 1 (one choice per request is supported), got {}", *n));
  }
  LS_RETURN_IF_ERROR(read_bool(body, "stream", out.stream));
  if (const json* options = find_field(body, "stream_options")) {
    if (!options->is_object()) return wrong_type("stream_options", "an object", *options);
    const json* include_usage = find_field(*options, "include_usage");
    if (include_usage != nullptr && !include_usage->is_boolean()) {
      return wrong_type("stream_options.include_usage", "a boolean", *include_usage);
    }
    out.include_usage = include_usage != nullptr && include_usage->get<bool>();
  }
  LS_RETURN_IF_ERROR(read_stop(body, "stop", limits, out.stop));
  LS_RETURN_IF_ERROR(read_string(body, "user", out.user));
  LS_RETURN_IF_ERROR(read_bool(body, "ignore_eos", out.ignore_eos));
  LS_RETURN_IF_ERROR(read_openai_sampling(body, out));
  LS_RETURN_IF_ERROR(read_response_format(body, out.response_format));
  // max_completion_tokens is the newer name; it wins when both are given.
  LS_RETURN_IF_ERROR(read_max_tokens(body, "max_tokens", limits, out.max_tokens));
  LS_RETURN_IF_ERROR(read_max_tokens(body, "max_completion_tokens", limits, out.max_tokens));
  if (const json* bias = find_field(body, "logit_bias")) {
    if (!bias->is_object()) return wrong_type("logit_bias", "an object", *bias);
    if (!bias->empty()) {
      return Status(StatusCode::kUnsupported, "'logit_bias' is not supported by this server");
    }
  }
  return Status::ok();
}

// Chat fields of OpenAI's API that this server does not implement: answered with 400 rather
// than dropped, so that a client never takes a silent default for the thing it asked.
Status reject_unimplemented_chat_fields(const json& body) {
  for (const char* key : {"audio", "prediction", "web_search_options"}) {
    if (find_field(body, key) != nullptr) {
      return Status(StatusCode::kUnsupported,
                    fmt::format("'{}' is not supported by this server", key));
    }
  }
  for (const char* key : {"functions", "function_call"}) {
    if (find_field(body, key) != nullptr) {
      return Status(StatusCode::kUnsupported,
                    fmt::format("'{}' (the deprecated function-calling API) is not supported; "
                                "use 'tools' and 'tool_choice'",
                                key));
    }
  }
  if (const json* modalities = find_field(body, "modalities")) {
    if (*modalities != json::array({"text"})) {
      return Status(StatusCode::kUnsupported,
                    "'modalities' must be [\"text\"]: only text is served");
    }
  }
  return Status::ok();
}

Status check_json_depth(std::string_view body) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) {
        return invalid(fmt::format("invalid JSON: nesting deeper than {} levels at byte {}",
                                   kMaxJsonDepth, i));
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return Status::ok();
}

Status read_message_content(const json& message, size_t index, const std::string& role,
                            std::string& out) {
  const std::string name = fmt::format("messages[{}].content", index);
  auto it = message.find("content");
  if (it == message.end() || it->is_null()) {
    // An assistant turn may carry only tool calls; its content is then null.
    if (role == "assistant") return Status::ok();
    return invalid(fmt::format("'{}' is required for role '{}'", name, role));
  }
  if (it->is_string()) {
    out = it->get<std::string>();
    return Status::ok();
  }
  if (!it->is_array()) return wrong_type(name, "a string or an array of content parts", *it);
  for (size_t k = 0; k < it->size(); ++k) {
    const json& part = (*it)[k];
    const std::string part_name = fmt::format("{}[{}]", name, k);
    if (!part.is_object()) return wrong_type(part_name, "an object", part);
    std::string type;
    LS_RETURN_IF_ERROR(read_string(part, "type", type));
    if (type != "text") {
      return Status(StatusCode::kUnsupported,
                    fmt::format("'{}.type' must be \"text\" (other content is not supported), "
                                "got \"{}\"",
                                part_name, type));
    }
    const json* text = find_field(part, "text");
    if (text == nullptr || !text->is_string()) {
      return invalid(fmt::format("'{}.text' must be a string", part_name));
    }
    if (k > 0) out.push_back('\n');
    out += text->get<std::string>();
  }
  return Status::ok();
}

// The fields a model's own chat template may use besides role and content: an assistant's
// tool_calls (and its null content), a tool result's tool_call_id and name.
Status read_message_fields(const json& message, size_t index, ChatMessage& out) {
  nlohmann::ordered_json fields = nlohmann::ordered_json::object();
  if (const json* calls = find_field(message, "tool_calls");
      calls != nullptr && !calls->is_null()) {
    if (!calls->is_array()) {
      return wrong_type(fmt::format("messages[{}].tool_calls", index), "an array", *calls);
    }
    for (size_t k = 0; k < calls->size(); ++k) {
      if (!(*calls)[k].is_object()) {
        return wrong_type(fmt::format("messages[{}].tool_calls[{}]", index, k), "an object",
                          (*calls)[k]);
      }
    }
    fields["tool_calls"] = nlohmann::ordered_json::parse(calls->dump());
  }
  for (const char* key : {"tool_call_id", "name"}) {
    if (const json* value = find_field(message, key); value != nullptr && !value->is_null()) {
      if (!value->is_string()) {
        return wrong_type(fmt::format("messages[{}].{}", index, key), "a string", *value);
      }
      fields[key] = value->get<std::string>();
    }
  }
  const auto content = message.find("content");
  if (content == message.end() || content->is_null()) fields["content"] = nullptr;
  if (!fields.empty()) out.fields = std::move(fields);
  return Status::ok();
}

Status read_messages(const json& body, std::vector<ChatMessage>& out) {
  const json* messages = find_field(body, "messages");
  if (messages == nullptr) return invalid("'messages' is required");
  if (!messages->is_array()) return wrong_type("messages", "an array", *messages);
  if (messages->empty()) return invalid("'messages' must contain at least one message");
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& message = (*messages)[i];
    if (!message.is_object())
      return wrong_type(fmt::format("messages[{}]", i), "an object", message);
    const json* role = find_field(message, "role");
    if (role == nullptr) return invalid(fmt::format("'messages[{}].role' is required", i));
    if (!role->is_string())
      return wrong_type(fmt::format("messages[{}].role", i), "a string", *role);
    ChatMessage parsed;
    parsed.role = role->get<std::string>();
    if (parsed.role == "developer") parsed.role = "system";
    if (parsed.role != "system" && parsed.role != "user" && parsed.role != "assistant" &&
        parsed.role != "tool") {
      return invalid(fmt::format(
          "'messages[{}].role' must be one of system, developer, user, assistant, tool; got "
          "\"{}\"",
          i, parsed.role));
    }
    LS_RETURN_IF_ERROR(read_message_content(message, i, parsed.role, parsed.content));
    LS_RETURN_IF_ERROR(read_message_fields(message, i, parsed));
    out.push_back(std::move(parsed));
  }
  return Status::ok();
}

// prompt: a string, an array of token ids, or a one-element array of either (a batch of one).
Status read_prompt(const json& body, ParsedGeneration& out) {
  const json* prompt = find_field(body, "prompt");
  if (prompt == nullptr) return invalid("'prompt' is required");
  const json* single = prompt;
  if (prompt->is_array() && !prompt->empty() && !(*prompt)[0].is_number()) {
    if (prompt->size() != 1) {
      return invalid(fmt::format("'prompt' holds {} prompts; one prompt per request is supported",
                                 prompt->size()));
    }
    single = &(*prompt)[0];
  }
  if (single->is_string()) {
    out.prompt_kind = PromptKind::kText;
    out.prompt_text = single->get<std::string>();
    return Status::ok();
  }
  if (!single->is_array()) {
    return wrong_type("prompt", "a string or an array of token ids", *single);
  }
  if (single->empty()) return invalid("'prompt' must not be an empty array");
  out.prompt_kind = PromptKind::kTokens;
  return read_token_array(*single, "prompt", out.prompt_tokens);
}

}  // namespace

Result<nlohmann::json> parse_json_object(std::string_view body) {
  if (auto bad = find_invalid_utf8(body)) {
    return invalid(
        fmt::format("request body is not valid UTF-8 (first bad byte at offset {})", *bad));
  }
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    return invalid("request body is empty; expected a JSON object");
  }
  LS_RETURN_IF_ERROR(check_json_depth(body));
  json parsed;
  try {
    parsed = json::parse(body);
  } catch (const json::exception& e) {
    return invalid(fmt::format("invalid JSON: {}", e.what()));
  }
  if (!parsed.is_object()) {
    return invalid(
        fmt::format("request body must be a JSON object, got {}", json_type_name(parsed)));
  }
  return parsed;
}

Result<ParsedGeneration> parse_chat_completion(const nlohmann::json& body,
                                               const ParseLimits& limits) {
  ParsedGeneration out;
  out.prompt_kind = PromptKind::kMessages;
  LS_RETURN_IF_ERROR(read_messages(body, out.messages));
  LS_RETURN_IF_ERROR(read_tool_request(body, out.tools));
  LS_RETURN_IF_ERROR(reject_unimplemented_chat_fields(body));
  LS_RETURN_IF_ERROR(read_openai_common(body, limits, out));
  if (out.tools.forced() && out.response_format.kind != ResponseFormatSpec::Kind::kText) {
    return invalid("'response_format' cannot be combined with a 'tool_choice' that forces a call");
  }
  LS_RETURN_IF_ERROR(read_bool(body, "logprobs", out.sampling.logprobs));
  std::optional<int64_t> top_logprobs;
  LS_RETURN_IF_ERROR(read_int(body, "top_logprobs", 0, limits.max_top_logprobs, top_logprobs));
  if (top_logprobs) {
    if (!out.sampling.logprobs && *top_logprobs > 0) {
      return invalid("'top_logprobs' requires 'logprobs': true");
    }
    out.sampling.top_logprobs = static_cast<int32_t>(*top_logprobs);
  }
  return out;
}

Result<ParsedGeneration> parse_completion(const nlohmann::json& body, const ParseLimits& limits) {
  ParsedGeneration out;
  LS_RETURN_IF_ERROR(read_prompt(body, out));
  LS_RETURN_IF_ERROR(read_openai_common(body, limits, out));
  // Legacy completions: logprobs is the number of alternatives (0-5), null = off.
  std::optional<int64_t> logprobs;
  LS_RETURN_IF_ERROR(read_int(body, "logprobs", 0, 5, logprobs));
  if (logprobs) {
    out.sampling.logprobs = true;
    out.sampling.top_logprobs = static_cast<int32_t>(*logprobs);
  }
  bool echo = false;
  LS_RETURN_IF_ERROR(read_bool(body, "echo", echo));
  if (echo) return Status(StatusCode::kUnsupported, "'echo': true is not supported");
  std::optional<int64_t> best_of;
  LS_RETURN_IF_ERROR(read_int(body, "best_of", 1, 1, best_of));
  std::string suffix;
  LS_RETURN_IF_ERROR(read_string(body, "suffix", suffix));
  if (!suffix.empty()) return Status(StatusCode::kUnsupported, "'suffix' is not supported");
  return out;
}

Result<ParsedGeneration> parse_simple_chat(const nlohmann::json& body, const ParseLimits& limits) {
  ParsedGeneration out;
  out.stream = true;
  LS_RETURN_IF_ERROR(read_bool(body, "stream", out.stream));
  out.prompt_kind = PromptKind::kMessages;
  std::string system;
  LS_RETURN_IF_ERROR(read_string(body, "system", system));
  if (!system.empty()) out.messages.push_back({"system", std::move(system)});
  const json* prompt = find_field(body, "prompt");
  if (prompt == nullptr) return invalid("'prompt' is required");
  if (!prompt->is_string()) return wrong_type("prompt", "a string", *prompt);
  if (prompt->get_ref<const std::string&>().empty()) return invalid("'prompt' must not be empty");
  out.messages.push_back({"user", prompt->get<std::string>()});
  LS_RETURN_IF_ERROR(read_max_tokens(body, "maxTokens", limits, out.max_tokens));
  LS_RETURN_IF_ERROR(read_string(body, "model", out.model));
  LS_RETURN_IF_ERROR(read_keep_alive(body, out.keep_alive_ms));
  SamplingParams& s = out.sampling;
  LS_RETURN_IF_ERROR(read_float(body, "temperature", {0.0, 2.0}, s.temperature));
  LS_RETURN_IF_ERROR(read_float(body, "topP", {0.0, 1.0}, s.top_p));
  greedy_if_top_p_zero(s);
  std::optional<int64_t> top_k;
  LS_RETURN_IF_ERROR(read_int(body, "topK", 0, std::numeric_limits<int32_t>::max(), top_k));
  if (top_k) s.top_k = static_cast<int32_t>(*top_k);
  LS_RETURN_IF_ERROR(read_float(body, "minP", {0.0, 1.0}, s.min_p));
  LS_RETURN_IF_ERROR(read_float(body, "presencePenalty", {-2.0, 2.0}, s.presence_penalty));
  LS_RETURN_IF_ERROR(read_float(body, "frequencyPenalty", {-2.0, 2.0}, s.frequency_penalty));
  LS_RETURN_IF_ERROR(
      read_float(body, "repetitionPenalty", {0.0, 10.0, true}, s.repetition_penalty));
  LS_RETURN_IF_ERROR(read_seed(body, "seed", s.seed));
  LS_RETURN_IF_ERROR(read_stop(body, "stop", limits, out.stop));
  LS_RETURN_IF_ERROR(read_bool(body, "ignoreEos", out.ignore_eos));
  return out;
}

Result<TokenizeRequest> parse_tokenize(const nlohmann::json& body) {
  TokenizeRequest out;
  const json* content = find_field(body, "content");
  if (content == nullptr) return invalid("'content' is required");
  if (!content->is_string()) return wrong_type("content", "a string", *content);
  out.content = content->get<std::string>();
  LS_RETURN_IF_ERROR(read_bool(body, "add_special", out.add_special));
  LS_RETURN_IF_ERROR(read_bool(body, "parse_special", out.parse_special));
  return out;
}

Result<std::vector<int32_t>> parse_detokenize(const nlohmann::json& body) {
  const json* tokens = find_field(body, "tokens");
  if (tokens == nullptr) return invalid("'tokens' is required");
  if (!tokens->is_array()) return wrong_type("tokens", "an array of token ids", *tokens);
  std::vector<int32_t> out;
  LS_RETURN_IF_ERROR(read_token_array(*tokens, "tokens", out));
  return out;
}

}  // namespace llamaserve::server
