// The engine's entry point: a template parsed once, rendered many times (concurrently: render
// is const and keeps its state on the stack).
//
//   auto tmpl = jinja::Template::parse(text);              // syntax errors: kInvalidArgument
//   auto out = tmpl->render(template_vars, client_vars);   // out->text, out->client_ranges
//
// Variables come as JSON objects. Every string inside `client_variables` (messages, tools) is
// client text: the output bytes copied or derived from them are listed in client_ranges, so
// that the caller can tokenize them as plain text. `template_variables` (bos_token,
// add_generation_prompt) are trusted like the template's own literals. The globals
// raise_exception(message) and strftime_now(format) of Hugging Face's apply_chat_template are
// always defined, as are range, namespace and dict.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "jinja/errors.h"
#include "jinja/evaluator.h"
#include "jinja/lexer.h"
#include "jinja/value.h"

namespace llamaserve::jinja {

struct Program;

struct RenderOutput {
  std::string text;
  std::vector<ByteRange> client_ranges;  // sorted, non-overlapping, non-adjacent
};

// Where and why a parse or render failed, for callers that report more than a Status.
struct ErrorDetail {
  ErrorKind kind = ErrorKind::kRuntime;
  int line = 0;  // 0: unknown
  std::string message;
};

class Template {
 public:
  // Also rejects filters and tests that do not exist, as jinja2 does when it compiles.
  static Result<Template> parse(std::string_view text, const LexerOptions& options = {},
                                ErrorDetail* error = nullptr);

  // kInvalidArgument with "<message> (line N)" for a runtime error or raise_exception, and for
  // a limit reached; `error` (when given) receives the parts.
  Result<RenderOutput> render(const nlohmann::ordered_json& template_variables,
                              const nlohmann::ordered_json& client_variables,
                              const RenderLimits& limits = {}, ErrorDetail* error = nullptr) const;

 private:
  explicit Template(std::shared_ptr<const Program> program) : program_(std::move(program)) {}
  std::shared_ptr<const Program> program_;
};

// JSON → engine value; strings tainted when `client` (throws JinjaError past kMaxValueDepth).
Value value_from_json(const nlohmann::ordered_json& json, bool client);

}  // namespace llamaserve::jinja
