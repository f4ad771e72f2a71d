// Parsing and validation of generation request bodies (OpenAI chat/completions and the
// simple /chat endpoint) into plain structs. Pure functions of the JSON: no tokenizer, no
// engine, so every rule is unit-tested on its own. Unknown fields are ignored (as OpenAI
// does); known fields with the wrong type or an out-of-range value are rejected with a
// message that names the field, what was expected and what was found, and so are OpenAI
// fields that this server does not implement (n > 1, audio, predicted outputs...).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "engine/request.h"
#include "server/tool_request.h"
#include "tokenizer/chat_template.h"

namespace llamaserve::server {

enum class PromptKind { kMessages, kText, kTokens };

// "response_format": {"type": "text" | "json_object" | "json_schema", "json_schema": {"name",
// "schema", "strict", "description"}}. The schema itself is compiled by the caller (against
// the model's vocabulary), from the body's text so that property order is kept.
struct ResponseFormatSpec {
  enum class Kind { kText, kJsonObject, kJsonSchema } kind = Kind::kText;
  std::string name;
  bool strict = false;
};

struct ParsedGeneration {
  std::string model;  // empty: not given
  // "keep_alive": how long the model stays loaded without requests from now on; 0 = for good.
  std::optional<int64_t> keep_alive_ms;
  PromptKind prompt_kind = PromptKind::kMessages;
  std::vector<ChatMessage> messages;  // kMessages; roles system/user/assistant/tool
                                      // ("developer" arrives as "system")
  // "tools", "tool_choice", "parallel_tool_calls" of a chat request.
  ToolRequest tools;
  std::string prompt_text;             // kText
  std::vector<int32_t> prompt_tokens;  // kTokens (range against the vocabulary not checked)
  std::optional<int32_t> max_tokens;   // absent: as many as the limit and context allow
  SamplingParams sampling;
  std::vector<std::string> stop;
  bool ignore_eos = false;  // extension: generate max_tokens even past end-of-generation tokens
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  ResponseFormatSpec response_format;
  std::string user;
};

struct ParseLimits {
  int32_t max_tokens_limit = 4096;  // --max-tokens-limit
  int32_t max_stop_strings = 16;
  int32_t max_top_logprobs = 20;
};

// The body as a JSON object: 400-class Status for invalid UTF-8 (with the byte offset),
// malformed JSON (with nlohmann's position) or a non-object top level.
Result<nlohmann::json> parse_json_object(std::string_view body);

// POST /v1/chat/completions
Result<ParsedGeneration> parse_chat_completion(const nlohmann::json& body,
                                               const ParseLimits& limits);
// POST /v1/completions
Result<ParsedGeneration> parse_completion(const nlohmann::json& body, const ParseLimits& limits);
// POST /chat: {"prompt": "...", "maxTokens": 32, ...}; camelCase fields; streamed unless
// "stream": false.
Result<ParsedGeneration> parse_simple_chat(const nlohmann::json& body, const ParseLimits& limits);

struct TokenizeRequest {
  std::string content;
  bool add_special = false;   // add BOS (and the like) as the model would for a prompt
  bool parse_special = true;  // "<|im_start|>" in the text becomes the special token
};
Result<TokenizeRequest> parse_tokenize(const nlohmann::json& body);

// {"tokens": [ids]}; ids are checked against [0, INT32_MAX] here, against the vocabulary by
// the caller.
Result<std::vector<int32_t>> parse_detokenize(const nlohmann::json& body);

}  // namespace llamaserve::server
