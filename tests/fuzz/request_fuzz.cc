// libFuzzer target for the HTTP request body parsers (server/request_parser.h,
// server/embedding_request.h). The input is a request body; every parser runs on it (chat
// completions, completions, /chat, tokenize, detokenize, embeddings), under the default limits
// and under the tightest ones. Besides "never crash,
// never let an exception out" (an escaping exception aborts), it checks:
//   - a rejected body gets a client-error Status (kInvalidArgument or kUnsupported) with a
//     message;
//   - an accepted request satisfies what the header documents: the prompt kind, roles,
//     non-empty prompts, token ids in [0, INT32_MAX], max_tokens in [1, limit], at most
//     max_stop_strings non-empty stop strings, sampling values finite and in their ranges,
//     top_logprobs only with logprobs and within its limit, all text valid UTF-8;
//   - an accepted embeddings request has 1 to kMaxEmbeddingInputs inputs, either texts or id
//     lists, none empty, ids in [0, INT32_MAX], dimensions >= 1; a rejection names its field.
// A violated property aborts, which libFuzzer reports as a crash with the input saved.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/api_error.h"
#include "server/embedding_request.h"
#include "server/request_parser.h"
#include "server/utf8.h"

namespace llamaserve::server {
namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "request_fuzz property violated: %s\n", what);
  std::abort();
}

void check(bool condition, const char* what) {
  if (!condition) fail(what);
}

void check_text(std::string_view text, const char* what) { check(is_valid_utf8(text), what); }

bool in_range(float value, float min_value, float max_value) {
  return std::isfinite(value) && value >= min_value && value <= max_value;
}

template <typename T>
void check_rejection(const Result<T>& result) {
  if (result.is_ok()) return;
  const StatusCode code = result.status().code();
  check(code == StatusCode::kInvalidArgument || code == StatusCode::kUnsupported,
        "a bad body is not a client error");
  check(!result.status().message().empty(), "error without a message");
}

void check_sampling(const SamplingParams& s, int32_t max_top_logprobs) {
  check(in_range(s.temperature, 0.0f, 2.0f), "temperature out of range");
  check(in_range(s.top_p, 0.0f, 1.0f), "top_p out of range");
  check(in_range(s.min_p, 0.0f, 1.0f), "min_p out of range");
  check(s.top_k >= 0, "negative top_k");
  check(in_range(s.presence_penalty, -2.0f, 2.0f), "presence_penalty out of range");
  check(in_range(s.frequency_penalty, -2.0f, 2.0f), "frequency_penalty out of range");
  check(in_range(s.repetition_penalty, 0.0f, 10.0f) && s.repetition_penalty > 0.0f,
        "repetition_penalty out of range");
  check(s.top_logprobs >= 0 && s.top_logprobs <= max_top_logprobs, "top_logprobs out of range");
  check(s.top_logprobs == 0 || s.logprobs, "top_logprobs without logprobs");
}

// What every accepted generation request satisfies, whichever endpoint parsed it.
void check_generation(const ParsedGeneration& g, const ParseLimits& limits,
                      int32_t max_top_logprobs) {
  check_text(g.model, "model is not valid UTF-8");
  check_text(g.user, "user is not valid UTF-8");
  check(!g.max_tokens || (*g.max_tokens >= 1 && *g.max_tokens <= limits.max_tokens_limit),
        "max_tokens out of range");
  check(g.stop.size() <= static_cast<size_t>(std::max(limits.max_stop_strings, 1)),
        "too many stop strings");
  for (const std::string& stop : g.stop) {
    check(!stop.empty(), "empty stop string");
    check_text(stop, "stop string is not valid UTF-8");
  }
  check_sampling(g.sampling, max_top_logprobs);
  switch (g.prompt_kind) {
    case PromptKind::kMessages:
      check(!g.messages.empty(), "no messages");
      check(g.prompt_text.empty() && g.prompt_tokens.empty(), "messages with another prompt");
      for (const ChatMessage& message : g.messages) {
        check(message.role == "system" || message.role == "user" || message.role == "assistant" ||
                  message.role == "tool",
              "unexpected role");
        check_text(message.content, "message content is not valid UTF-8");
      }
      break;
    case PromptKind::kText:
      check(g.messages.empty() && g.prompt_tokens.empty(), "text prompt with another prompt");
      check_text(g.prompt_text, "prompt is not valid UTF-8");
      break;
    case PromptKind::kTokens:
      check(g.messages.empty() && g.prompt_text.empty(), "token prompt with another prompt");
      check(!g.prompt_tokens.empty(), "empty token prompt");
      for (const int32_t id : g.prompt_tokens) check(id >= 0, "negative token id");
      break;
  }
}

void check_all_parsers(const nlohmann::json& body, const ParseLimits& limits) {
  auto chat = parse_chat_completion(body, limits);
  check_rejection(chat);
  if (chat.is_ok()) {
    check(chat->prompt_kind == PromptKind::kMessages, "chat request without messages");
    check_generation(*chat, limits, limits.max_top_logprobs);
  }

  auto completion = parse_completion(body, limits);
  check_rejection(completion);
  if (completion.is_ok()) {
    check(completion->prompt_kind != PromptKind::kMessages, "completion request with messages");
    check_generation(*completion, limits, 5);  // legacy logprobs: 0-5 alternatives
  }

  auto simple = parse_simple_chat(body, limits);
  check_rejection(simple);
  if (simple.is_ok()) {
    check(simple->prompt_kind == PromptKind::kMessages, "/chat request without messages");
    check_generation(*simple, limits, 0);
    const auto& messages = simple->messages;
    check(messages.size() == 1 || messages.size() == 2, "/chat gives one or two messages");
    check(messages.back().role == "user" && !messages.back().content.empty(),
          "/chat prompt is not a non-empty user message");
    check(messages.size() == 1 ||
              (messages.front().role == "system" && !messages.front().content.empty()),
          "/chat system prompt is not a non-empty system message");
  }

  auto tokenize = parse_tokenize(body);
  check_rejection(tokenize);
  if (tokenize.is_ok()) check_text(tokenize->content, "tokenize content is not valid UTF-8");

  auto detokenize = parse_detokenize(body);
  check_rejection(detokenize);
  if (detokenize.is_ok()) {
    for (const int32_t id : *detokenize) check(id >= 0, "negative token id to detokenize");
  }

  auto embeddings = parse_embeddings(body);
  check_rejection(embeddings);
  if (!embeddings.is_ok()) {
    check(!error_field(embeddings.status()).empty(), "an embeddings error names no field");
  } else {
    const ParsedEmbeddings& e = *embeddings;
    check(e.texts.empty() != e.token_inputs.empty(), "embeddings need texts or ids, not both");
    check(e.n_inputs() >= 1 && e.n_inputs() <= kMaxEmbeddingInputs, "embedding input count");
    for (const std::string& text : e.texts) {
      check(!text.empty(), "empty embedding text");
      check_text(text, "embedding text is not valid UTF-8");
    }
    for (const auto& ids : e.token_inputs) {
      check(!ids.empty(), "empty embedding id list");
      for (const int32_t id : ids) check(id >= 0, "negative embedding token id");
    }
    check(!e.dimensions || *e.dimensions >= 1, "dimensions below 1");
    check_text(e.model, "embeddings model is not valid UTF-8");
  }
}

}  // namespace
}  // namespace llamaserve::server

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace llamaserve::server;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  auto parsed = parse_json_object(body);
  if (!parsed.is_ok()) {
    check(parsed.status().code() == llamaserve::StatusCode::kInvalidArgument,
          "a bad body is not a client error");
    check(!parsed.status().message().empty(), "error without a message");
    return 0;
  }
  check(is_valid_utf8(body), "a body that is not valid UTF-8 was accepted");
  check(parsed->is_object(), "a body that is not an object was accepted");

  check_all_parsers(*parsed, ParseLimits{});
  ParseLimits tight;
  tight.max_tokens_limit = 1;
  tight.max_stop_strings = 0;
  tight.max_top_logprobs = 0;
  check_all_parsers(*parsed, tight);
  return 0;
}
