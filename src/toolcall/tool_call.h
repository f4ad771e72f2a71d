// Tool calling: how each model family writes a call to one of the request's tools in its
// output text, and what the server turns that text into (OpenAI `tool_calls`).
//
//   kHermes    <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>   (Hermes 2 Pro,
//              Qwen 2.5; one block per call, text may come before the first block)
//   kLlama3    [<|python_tag|>]{"name": "f", "parameters": {...}}   (LLaMA 3.1 / 3.2; calls
//              separated by ";" or new lines)
//   kMistral   [TOOL_CALLS][{"name": "f", "arguments": {...}, "id": "a1b2c3d4e"}, ...]
//   kDeepSeek  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{...}
//              \n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>   (DeepSeek R1 distills)
//   kGeneric   a template that knows no tools: the server describes the tools in a system
//              message and asks for kHermes blocks (toolcall/prompt.h)
//
// Every syntax also accepts kHermes blocks and an output that is nothing but a JSON object
// (or array of objects) with "name" and "arguments" / "parameters": small models drift
// between the forms they were trained on.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace llamaserve::toolcall {

enum class Syntax { kHermes, kLlama3, kMistral, kDeepSeek, kGeneric };
const char* syntax_name(Syntax syntax);

// What a model's chat template does with tools.
struct TemplateToolSupport {
  Syntax syntax = Syntax::kGeneric;
  bool renders_tools = false;       // it lists the request's `tools` itself
  bool renders_tool_calls = false;  // it writes earlier assistant `tool_calls` and tool results
};

// Recognised from the template's text (its call markers and the variables it reads); an
// empty text (a built-in format) knows no tools.
TemplateToolSupport detect_tool_support(std::string_view template_text);

struct ToolCall {
  std::string id;  // the model's own id where its syntax has one, else "call_" + 24
                   // random letters and digits
  std::string name;
  std::string arguments;  // JSON text of the arguments object, as OpenAI sends it
};

// A finished output split into what the user reads and the calls.
struct ParsedOutput {
  std::string content;  // the text outside the calls (trimmed when there are calls)
  std::vector<ToolCall> calls;
};

// The calls in a complete output. When the text holds no call, or a call that does not parse,
// the whole text is content and there are no calls: a broken call is shown, never dropped.
ParsedOutput parse_output(std::string_view text, Syntax syntax);

// The texts that start a call in this syntax's output (kHermes's tag is among them for every
// syntax).
std::vector<std::string_view> call_markers(Syntax syntax);

// A new id for a call whose syntax has none.
std::string new_call_id();

}  // namespace llamaserve::toolcall
