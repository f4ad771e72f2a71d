// The filters, tests, methods and global functions templates call: jinja2's built-in filters
// and tests as chat templates use them, Python's str/dict/list methods, range(), namespace(),
// dict(), and HF's tojson (json.dumps with ensure_ascii=False and indent/separators/sort_keys).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jinja/evaluator.h"
#include "jinja/value.h"

namespace llamaserve::jinja {

bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

Value call_filter(Evaluator& ev, const std::string& name, const Value& input, Arguments& args);
bool call_test(Evaluator& ev, const std::string& name, const Value& input, Arguments& args);

// object.name as a bound Python method (str.strip, dict.items, ...); undefined when the type
// has no such method.
Value bound_method(const Value& object, const std::string& name);

// range, namespace, dict.
void add_global_functions(Scope& scope);

// The items a for loop visits: list items, dict keys, string characters, none for undefined.
std::vector<Value> iterable_items(const Value& value);

// Python's "format % args" (%s %r %d %i %f %%).
Value format_percent(Evaluator& ev, const Value& format, const Value& args);

struct JsonOptions {
  std::optional<std::string> indent;  // per level; none: everything on one line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
// json.dumps(value, ensure_ascii=False, ...) appended to out; strings with provenance keep it.
void append_json(TextBuilder& out, const Value& value, const JsonOptions& options, int level = 0);

// Reads a builtin's arguments by position or keyword, as a Python signature would.
class ArgReader {
 public:
  ArgReader(const char* function, Arguments& args, std::vector<std::string_view> names);
  // The argument at `index` (its name names[index]); nullopt when not given.
  std::optional<Value> get(size_t index) const;
  Value get_or(size_t index, Value fallback) const;
  // Positional arguments past names.size() (for *args).
  std::vector<Value> rest() const;

 private:
  const char* function_;
  Arguments& args_;
  std::vector<std::string_view> names_;
};

int64_t to_int_arg(const Value& v, const char* what);
std::string to_text_arg(const Value& v, const char* what);

}  // namespace llamaserve::jinja
