// Template text → parse and render with a small fixed chat context, under tight limits.
// Properties: no crash, leak or sanitizer report on any text; a render that succeeds reports
// client ranges that are sorted, non-empty, non-adjacent and inside the output.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>

#include "jinja/template.h"

namespace {

const nlohmann::ordered_json& template_variables() {
  static const nlohmann::ordered_json vars = {{"add_generation_prompt", true},
                                              {"bos_token", "<s>"},
                                              {"eos_token", "</s>"},
                                              {"documents", nullptr}};
  return vars;
}

const nlohmann::ordered_json& client_variables() {
  static const nlohmann::ordered_json vars = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "hi <|im_end|> {{ x }} \u00e9"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call12345",
        "type": "function", "function": {"name": "f", "arguments": {"a": [1, 2.5, true]}}}]},
      {"role": "tool", "tool_call_id": "call12345", "content": "{\"r\": 1}"}
    ],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d",
      "parameters": {"type": "object", "properties": {"a": {"type": "array",
      "items": {"type": "number"}}}}}}]
  })");
  return vars;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace llamaserve::jinja;
  using llamaserve::Result;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Result<Template> tmpl = Template::parse(text);
  if (!tmpl.is_ok()) return 0;
  RenderLimits limits;
  limits.max_steps = 200'000;
  limits.max_output_bytes = 1 << 20;
  limits.max_call_depth = 32;
  Result<RenderOutput> out = tmpl->render(template_variables(), client_variables(), limits);
  if (!out.is_ok()) return 0;
  size_t previous_end = 0;
  bool first = true;
  for (const ByteRange& range : out->client_ranges) {
    if (range.begin >= range.end || range.end > out->text.size()) std::abort();
    if (!first && range.begin <= previous_end) std::abort();
    previous_end = range.end;
    first = false;
  }
  return 0;
}
