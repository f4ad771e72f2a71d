// jinja2's tests, Python's str/dict/list methods, the global functions, tojson's JSON writer
// and "%" formatting.
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "jinja/builtins.h"
#include "jinja/errors.h"
#include "jinja/text_ops.h"

namespace llamaserve::jinja {

ArgReader::ArgReader(const char* function, Arguments& args, std::vector<std::string_view> names)
    : function_(function), args_(args), names_(std::move(names)) {
  for (const auto& [name, value] : args_.keyword) {
    if (std::find(names_.begin(), names_.end(), name) == names_.end()) {
      runtime_error("{}() got an unexpected keyword argument '{}'", function_, name);
    }
  }
}

std::optional<Value> ArgReader::get(size_t index) const {
  if (index < args_.positional.size()) return args_.positional[index];
  for (const auto& [name, value] : args_.keyword) {
    if (index < names_.size() && name == names_[index]) return value;
  }
  return std::nullopt;
}

Value ArgReader::get_or(size_t index, Value fallback) const {
  std::optional<Value> v = get(index);
  return v ? *v : fallback;
}

std::vector<Value> ArgReader::rest() const {
  if (args_.positional.size() <= names_.size()) return {};
  return {args_.positional.begin() + static_cast<ptrdiff_t>(names_.size()), args_.positional.end()};
}

int64_t to_int_arg(const Value& v, const char* what) {
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool();
  runtime_error("'{}' must be an integer, not {}", what, v.type_name());
}

std::string to_text_arg(const Value& v, const char* what) {
  if (v.is_string()) return v.text();
  runtime_error("'{}' must be a string, not {}", what, v.type_name());
}

// ---- tests ----------------------------------------------------------------------------

namespace {

using Test = bool (*)(Evaluator&, const Value&, Arguments&);

const Value& arg0(Arguments& a, const char* test) {
  if (a.positional.empty()) runtime_error("the '{}' test needs an argument", test);
  return a.positional[0];
}

bool t_defined(Evaluator&, const Value& v, Arguments&) { return !v.is_undefined(); }
bool t_undefined(Evaluator&, const Value& v, Arguments&) { return v.is_undefined(); }
bool t_none(Evaluator&, const Value& v, Arguments&) { return v.is_none(); }
bool t_boolean(Evaluator&, const Value& v, Arguments&) { return v.is_bool(); }
bool t_true(Evaluator&, const Value& v, Arguments&) { return v.is_bool() && v.as_bool(); }
bool t_false(Evaluator&, const Value& v, Arguments&) { return v.is_bool() && !v.as_bool(); }
bool t_integer(Evaluator&, const Value& v, Arguments&) { return v.is_int(); }
bool t_float(Evaluator&, const Value& v, Arguments&) { return v.is_float(); }
bool t_number(Evaluator&, const Value& v, Arguments&) { return v.is_number(); }
bool t_string(Evaluator&, const Value& v, Arguments&) { return v.is_string(); }
bool t_mapping(Evaluator&, const Value& v, Arguments&) { return v.is_dict(); }
bool t_iterable(Evaluator&, const Value& v, Arguments&) {
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
}
bool t_sequence(Evaluator&, const Value& v, Arguments&) {
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
}
bool t_callable(Evaluator&, const Value& v, Arguments&) { return v.is_callable(); }
bool t_sameas(Evaluator&, const Value& v, Arguments& a) {
  const Value& other = arg0(a, "sameas");
  if (v.is_none() || v.is_bool() || other.is_none() || other.is_bool()) return v.same_object(other);
  return v.same_object(other);
}
bool t_lower(Evaluator&, const Value& v, Arguments&) {
  if (!v.is_string()) return false;
  return map_case(v.str(), CaseMap::kLower).text == v.text();
}
bool t_upper(Evaluator&, const Value& v, Arguments&) {
  if (!v.is_string()) return false;
  return map_case(v.str(), CaseMap::kUpper).text == v.text();
}
int64_t int_subject(const Value& v, const char* test) {
  if (v.is_int() || v.is_bool()) return to_int_arg(v, test);
  if (v.is_undefined()) runtime_error("{}", v.undefined_hint());
  runtime_error("the '{}' test needs an integer, not {}", test, v.type_name());
}
bool t_odd(Evaluator&, const Value& v, Arguments&) { return (int_subject(v, "odd") % 2) != 0; }
bool t_even(Evaluator&, const Value& v, Arguments&) { return (int_subject(v, "even") % 2) == 0; }
bool t_divisibleby(Evaluator&, const Value& v, Arguments& a) {
  const int64_t d = to_int_arg(arg0(a, "divisibleby"), "num");
  if (d == 0) runtime_error("integer division or modulo by zero");
  if (d == -1) return true;
  return int_subject(v, "divisibleby") % d == 0;
}
bool t_eq(Evaluator&, const Value& v, Arguments& a) { return values_equal(v, arg0(a, "eq")); }
bool t_ne(Evaluator&, const Value& v, Arguments& a) { return !values_equal(v, arg0(a, "ne")); }
bool t_lt(Evaluator&, const Value& v, Arguments& a) { return value_less(v, arg0(a, "lt")); }
bool t_gt(Evaluator&, const Value& v, Arguments& a) { return value_less(arg0(a, "gt"), v); }
bool t_le(Evaluator&, const Value& v, Arguments& a) {
  return values_equal(v, arg0(a, "le")) || value_less(v, arg0(a, "le"));
}
bool t_ge(Evaluator&, const Value& v, Arguments& a) {
  return values_equal(v, arg0(a, "ge")) || value_less(arg0(a, "ge"), v);
}
bool t_in(Evaluator& ev, const Value& v, Arguments& a) {
  return binary_operator(ev, "in", v, arg0(a, "in")).as_bool();
}
bool t_filter(Evaluator&, const Value& v, Arguments&) {
  return v.is_string() && is_known_filter(v.text());
}
bool t_test(Evaluator&, const Value& v, Arguments&) {
  return v.is_string() && is_known_test(v.text());
}
bool t_escaped(Evaluator&, const Value&, Arguments&) { return false; }

const std::unordered_map<std::string_view, Test>& tests() {
  static const std::unordered_map<std::string_view, Test> table = {
      {"defined", t_defined},
      {"undefined", t_undefined},
      {"none", t_none},
      {"boolean", t_boolean},
      {"true", t_true},
      {"false", t_false},
      {"integer", t_integer},
      {"float", t_float},
      {"number", t_number},
      {"string", t_string},
      {"mapping", t_mapping},
      {"iterable", t_iterable},
      {"sequence", t_sequence},
      {"callable", t_callable},
      {"sameas", t_sameas},
      {"lower", t_lower},
      {"upper", t_upper},
      {"odd", t_odd},
      {"even", t_even},
      {"divisibleby", t_divisibleby},
      {"eq", t_eq},
      {"equalto", t_eq},
      {"==", t_eq},
      {"ne", t_ne},
      {"!=", t_ne},
      {"lt", t_lt},
      {"lessthan", t_lt},
      {"<", t_lt},
      {"gt", t_gt},
      {"greaterthan", t_gt},
      {">", t_gt},
      {"le", t_le},
      {"<=", t_le},
      {"ge", t_ge},
      {">=", t_ge},
      {"in", t_in},
      {"filter", t_filter},
      {"test", t_test},
      {"escaped", t_escaped},
  };
  return table;
}

}  // namespace

bool is_known_test(std::string_view name) { return tests().contains(name); }

bool call_test(Evaluator& ev, const std::string& name, const Value& input, Arguments& args) {
  const auto it = tests().find(name);
  if (it == tests().end()) runtime_error("No test named '{}'.", name);
  return it->second(ev, input, args);
}

// ---- methods --------------------------------------------------------------------------

namespace {

std::optional<std::string> optional_text(const std::optional<Value>& v, const char* what) {
  if (!v || v->is_none()) return std::nullopt;
  return to_text_arg(*v, what);
}

bool affix_match(const Value& self, const Value& affixes, bool prefix) {
  auto one = [&](const Value& a) {
    const std::string& t = self.text();
    const std::string& x = to_text_arg(a, prefix ? "prefix" : "suffix");
    return prefix ? t.starts_with(x) : t.ends_with(x);
  };
  if (affixes.is_list() && affixes.list().is_tuple) {
    return std::any_of(affixes.list().items.begin(), affixes.list().items.end(), one);
  }
  return one(affixes);
}

// str.format: {} {0} {name}, no format specs.
Value format_braces(Evaluator& ev, const Value& self, Arguments& a) {
  const std::string& t = self.text();
  TextBuilder out;
  size_t auto_index = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    const char c = t[i];
    if (c == '{' && i + 1 < t.size() && t[i + 1] == '{') {
      out.append("{");
      ++i;
    } else if (c == '}' && i + 1 < t.size() && t[i + 1] == '}') {
      out.append("}");
      ++i;
    } else if (c == '{') {
      const size_t close = t.find('}', i);
      if (close == std::string::npos) runtime_error("Single '{{' encountered in format string");
      const std::string field = t.substr(i + 1, close - i - 1);
      if (field.find_first_of(":!") != std::string::npos) {
        runtime_error("format specs in str.format are not supported");
      }
      const Value* v = nullptr;
      size_t index = 0;
      if (field.empty()) {
        index = auto_index++;
      } else if (std::all_of(field.begin(), field.end(),
                             [](char d) { return d >= '0' && d <= '9'; })) {
        index = static_cast<size_t>(std::stoull(field.substr(0, 9)));
      } else {
        for (const auto& [name, value] : a.keyword) {
          if (name == field) v = &value;
        }
        if (v == nullptr) runtime_error("KeyError: '{}'", field);
      }
      if (v == nullptr) {
        if (index >= a.positional.size()) runtime_error("Replacement index {} out of range", index);
        v = &a.positional[index];
      }
      append_str(out, *v);
      ev.check_size(out.size());
      i = close;
    } else if (c == '}') {
      runtime_error("Single '}}' encountered in format string");
    } else {
      out.append_slice(self.str(), i, i + 1);
    }
  }
  return Value::string(out.take());
}

Value string_method(Evaluator& ev, const Value& self, const std::string& name, Arguments& a) {
  const StringData& s = self.str();
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    ArgReader r(name.c_str(), a, {"chars"});
    const StripSide side = name == "strip"    ? StripSide::kBoth
                           : name == "lstrip" ? StripSide::kLeft
                                              : StripSide::kRight;
    return Value::string(strip_text(s, side, optional_text(r.get(0), "chars")));
  }
  if (name == "split" || name == "rsplit") {
    ArgReader r(name.c_str(), a, {"sep", "maxsplit"});
    const int64_t maxsplit = to_int_arg(r.get_or(1, Value::integer(-1)), "maxsplit");
    if (name == "rsplit" && maxsplit >= 0) runtime_error("rsplit with maxsplit is not supported");
    std::vector<Value> parts;
    for (StringData& part : split_text(s, optional_text(r.get(0), "sep"), maxsplit)) {
      parts.push_back(Value::string(std::move(part)));
    }
    ev.step(parts.size());
    return Value::list(std::move(parts));
  }
  if (name == "splitlines") {
    std::vector<Value> parts;
    for (StringData& part : split_text(s, std::string("\n"), -1))
      parts.push_back(Value::string(std::move(part)));
    if (!parts.empty() && parts.back().text().empty()) parts.pop_back();
    return Value::list(std::move(parts));
  }
  if (name == "startswith" || name == "endswith") {
    ArgReader r(name.c_str(), a, {"affix"});
    const std::optional<Value> affix = r.get(0);
    if (!affix) runtime_error("{}() takes at least 1 argument", name);
    return Value::boolean(affix_match(self, *affix, name == "startswith"));
  }
  if (name == "upper") return Value::string(map_case(s, CaseMap::kUpper));
  if (name == "lower") return Value::string(map_case(s, CaseMap::kLower));
  if (name == "title") return Value::string(map_case(s, CaseMap::kTitle));
  if (name == "capitalize") return Value::string(map_case(s, CaseMap::kCapitalize));
  if (name == "replace") {
    ArgReader r("replace", a, {"old", "new", "count"});
    const std::optional<Value> from = r.get(0);
    const std::optional<Value> to = r.get(1);
    if (!from || !to) runtime_error("replace() takes at least 2 arguments");
    if (!to->is_string())
      runtime_error("replace() argument 2 must be str, not {}", to->type_name());
    StringData out = replace_text(s, to_text_arg(*from, "old"), to->str(),
                                  to_int_arg(r.get_or(2, Value::integer(-1)), "count"));
    ev.check_size(out.text.size());
    return Value::string(std::move(out));
  }
  if (name == "find" || name == "rfind" || name == "count" || name == "index") {
    ArgReader r(name.c_str(), a, {"sub"});
    const std::optional<Value> sub = r.get(0);
    if (!sub) runtime_error("{}() takes at least 1 argument", name);
    const std::string needle = to_text_arg(*sub, "sub");
    if (name == "count") {
      if (needle.empty()) return Value::integer(static_cast<int64_t>(code_point_count(s.text) + 1));
      int64_t n = 0;
      for (size_t at = s.text.find(needle); at != std::string::npos;
           at = s.text.find(needle, at + needle.size()))
        ++n;
      return Value::integer(n);
    }
    const size_t at = name == "rfind" ? s.text.rfind(needle) : s.text.find(needle);
    if (at == std::string::npos) {
      if (name == "index") runtime_error("substring not found");
      return Value::integer(-1);
    }
    return Value::integer(
        static_cast<int64_t>(code_point_count(std::string_view(s.text).substr(0, at))));
  }
  if (name == "join") {
    ArgReader r("join", a, {"iterable"});
    TextBuilder out;
    bool first = true;
    for (const Value& item : iterable_items(r.get_or(0, Value::list({})))) {
      ev.step();
      if (!item.is_string())
        runtime_error("sequence item: expected str instance, {} found", item.type_name());
      if (!first) out.append(s);
      first = false;
      out.append(item.str());
      ev.check_size(out.size());
    }
    return Value::string(out.take());
  }
  if (name == "format") return format_braces(ev, self, a);
  auto all_chars = [&](auto predicate) {
    return Value::boolean(!s.text.empty() && std::all_of(s.text.begin(), s.text.end(), predicate));
  };
  if (name == "isdigit") return all_chars([](char c) { return c >= '0' && c <= '9'; });
  if (name == "isalpha")
    return all_chars([](char c) { return (c | 32) >= 'a' && (c | 32) <= 'z'; });
  if (name == "isalnum") {
    return all_chars(
        [](char c) { return ((c | 32) >= 'a' && (c | 32) <= 'z') || (c >= '0' && c <= '9'); });
  }
  if (name == "isspace") return all_chars(is_space_char);
  if (name == "islower")
    return Value::boolean(map_case(s, CaseMap::kLower).text == s.text &&
                          map_case(s, CaseMap::kUpper).text != s.text);
  if (name == "isupper")
    return Value::boolean(map_case(s, CaseMap::kUpper).text == s.text &&
                          map_case(s, CaseMap::kLower).text != s.text);
  runtime_error("'str object' has no attribute '{}'", name);
}

Value dict_method(const Value& self, const std::string& name, Arguments& a) {
  const DictData& d = self.dict();
  if (name == "items") {
    std::vector<Value> out;
    for (const auto& [k, v] : d.items) out.push_back(Value::list({k, v}, true));
    return Value::list(std::move(out));
  }
  if (name == "keys" || name == "values") {
    std::vector<Value> out;
    for (const auto& [k, v] : d.items) out.push_back(name == "keys" ? k : v);
    return Value::list(std::move(out));
  }
  if (name == "get") {
    ArgReader r("get", a, {"key", "default"});
    const std::optional<Value> key = r.get(0);
    if (!key) runtime_error("get expected at least 1 argument, got 0");
    if (const Value* v = d.find(*key)) return *v;
    return r.get_or(1, Value::none());
  }
  runtime_error("'dict object' has no attribute '{}'", name);
}

Value list_method(const Value& self, const std::string& name, Arguments& a) {
  const std::vector<Value>& items = self.list().items;
  ArgReader r(name.c_str(), a, {"value"});
  const std::optional<Value> value = r.get(0);
  if (!value) runtime_error("{}() takes exactly one argument", name);
  int64_t count = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!values_equal(items[i], *value)) continue;
    if (name == "index") return Value::integer(static_cast<int64_t>(i));
    ++count;
  }
  if (name == "index") runtime_error("value is not in list");
  return Value::integer(count);
}

bool is_string_method(const std::string& name) {
  static const char* const kNames[] = {
      "strip",    "lstrip",  "rstrip",  "split",  "rsplit",     "splitlines", "startswith",
      "endswith", "upper",   "lower",   "title",  "capitalize", "replace",    "find",
      "rfind",    "count",   "index",   "join",   "format",     "isdigit",    "isalpha",
      "isalnum",  "isspace", "islower", "isupper"};
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

}  // namespace

Value bound_method(const Value& object, const std::string& name) {
  if (object.is_string() && is_string_method(name)) {
    return Value::callable(name, [object, name](Evaluator& ev, Arguments& a) {
      return string_method(ev, object, name, a);
    });
  }
  if (object.is_dict() &&
      (name == "items" || name == "keys" || name == "values" || name == "get")) {
    return Value::callable(
        name, [object, name](Evaluator&, Arguments& a) { return dict_method(object, name, a); });
  }
  if (object.is_list() && (name == "index" || name == "count")) {
    return Value::callable(
        name, [object, name](Evaluator&, Arguments& a) { return list_method(object, name, a); });
  }
  return Value::undefined(
      fmt::format("'{} object' has no attribute '{}'", object.type_name(), name));
}

// ---- globals --------------------------------------------------------------------------

void add_global_functions(Scope& scope) {
  scope.vars["range"] = Value::callable("range", [](Evaluator& ev, Arguments& a) {
    if (!a.keyword.empty()) runtime_error("range() takes no keyword arguments");
    std::vector<int64_t> bounds;
    for (const Value& v : a.positional) bounds.push_back(to_int_arg(v, "range"));
    if (bounds.empty() || bounds.size() > 3) runtime_error("range expected 1 to 3 arguments");
    const int64_t start = bounds.size() == 1 ? 0 : bounds[0];
    const int64_t stop = bounds.size() == 1 ? bounds[0] : bounds[1];
    const int64_t step = bounds.size() == 3 ? bounds[2] : 1;
    if (step == 0) runtime_error("range() arg 3 must not be zero");
    std::vector<Value> items;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      ev.step();
      items.push_back(Value::integer(i));
      if (__builtin_add_overflow(i, step, &i)) break;
      i -= step;
    }
    return Value::list(std::move(items));
  });
  scope.vars["namespace"] = Value::callable("namespace", [](Evaluator&, Arguments& a) {
    Value ns = Value::new_namespace();
    for (const Value& v : a.positional) {
      if (!v.is_dict()) runtime_error("namespace() takes mappings or keyword arguments");
      for (const auto& [k, val] : v.dict().items) {
        if (val.is_namespace()) runtime_error("a namespace cannot hold another namespace");
        ns.ns().attrs.emplace_back(to_str(k).text(), val);
      }
    }
    for (auto& [name, value] : a.keyword) {
      if (value.is_namespace()) runtime_error("a namespace cannot hold another namespace");
      if (Value* slot = ns.ns().find(name)) {
        *slot = value;
      } else {
        ns.ns().attrs.emplace_back(name, value);
      }
    }
    return ns;
  });
  scope.vars["dict"] = Value::callable("dict", [](Evaluator&, Arguments& a) {
    std::vector<std::pair<Value, Value>> items;
    for (const Value& v : a.positional) {
      if (!v.is_dict()) runtime_error("dict() takes a mapping or keyword arguments");
      items.insert(items.end(), v.dict().items.begin(), v.dict().items.end());
    }
    for (auto& [name, value] : a.keyword) items.emplace_back(Value::string(name), value);
    return Value::dict(std::move(items));
  });
}

// ---- JSON -----------------------------------------------------------------------------

namespace {

void append_json_string(TextBuilder& out, const StringData& s) {
  out.append("\"");
  const size_t begin = out.size();
  std::string body;
  for (const char c : s.text) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': body += "\\\""; break;
      case '\\': body += "\\\\"; break;
      case '\n': body += "\\n"; break;
      case '\r': body += "\\r"; break;
      case '\t': body += "\\t"; break;
      case '\b': body += "\\b"; break;
      case '\f': body += "\\f"; break;
      default:
        if (u < 0x20) {
          body += fmt::format("\\u{:04x}", u);
        } else {
          body += c;
        }
    }
  }
  out.append(body);
  // Escaping changes lengths, so the escaped text of a string with any client byte is client
  // text as a whole.
  if (!s.taint.empty()) out.taint_from(begin);
  out.append("\"");
}

std::string json_number(const Value& v) {
  if (v.is_bool()) return v.as_bool() ? "true" : "false";
  if (v.is_int()) return std::to_string(v.as_int());
  const double d = v.as_float();
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  return format_float(d);
}

void newline_indent(TextBuilder& out, const JsonOptions& options, int level) {
  out.append("\n");
  for (int i = 0; i < level; ++i) out.append(*options.indent);
}

}  // namespace

void append_json(TextBuilder& out, const Value& value, const JsonOptions& options, int level) {
  if (value.is_none()) return out.append("null");
  if (value.is_number()) return out.append(json_number(value));
  if (value.is_string()) return append_json_string(out, value.str());
  if (value.is_list()) {
    const auto& items = value.list().items;
    if (items.empty()) return out.append("[]");
    out.append("[");
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out.append(options.item_separator);
      if (options.indent) newline_indent(out, options, level + 1);
      append_json(out, items[i], options, level + 1);
    }
    if (options.indent) newline_indent(out, options, level);
    return out.append("]");
  }
  if (value.is_dict()) {
    std::vector<const std::pair<Value, Value>*> items;
    for (const auto& item : value.dict().items) items.push_back(&item);
    if (items.empty()) return out.append("{}");
    if (options.sort_keys) {
      std::stable_sort(items.begin(), items.end(),
                       [](const auto* x, const auto* y) { return value_less(x->first, y->first); });
    }
    out.append("{");
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out.append(options.item_separator);
      if (options.indent) newline_indent(out, options, level + 1);
      const Value& key = items[i]->first;
      if (key.is_string()) {
        append_json_string(out, key.str());
      } else if (key.is_number() || key.is_none()) {
        out.append("\"");
        out.append(key.is_none() ? "null" : json_number(key));
        out.append("\"");
      } else {
        runtime_error("keys must be str, int, float, bool or None, not {}", key.type_name());
      }
      out.append(options.key_separator);
      append_json(out, items[i]->second, options, level + 1);
    }
    if (options.indent) newline_indent(out, options, level);
    return out.append("}");
  }
  runtime_error("Object of type {} is not JSON serializable", value.type_name());
}

// ---- % formatting ---------------------------------------------------------------------

Value format_percent(Evaluator& ev, const Value& format, const Value& args) {
  std::vector<Value> values;
  if (args.is_list() && args.list().is_tuple) {
    values = args.list().items;
  } else {
    values.push_back(args);
  }
  const std::string& t = format.text();
  TextBuilder out;
  size_t next = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] != '%') {
      out.append_slice(format.str(), i, i + 1);
      continue;
    }
    if (++i >= t.size()) runtime_error("incomplete format");
    if (t[i] == '%') {
      out.append("%");
      continue;
    }
    int precision = -1;
    if (t[i] == '.') {
      precision = 0;
      while (++i < t.size() && t[i] >= '0' && t[i] <= '9')
        precision = std::min(precision * 10 + (t[i] - '0'), 100);
      if (i >= t.size()) runtime_error("incomplete format");
    }
    if (next >= values.size()) runtime_error("not enough arguments for format string");
    const Value& v = values[next++];
    switch (t[i]) {
      case 's': append_str(out, v); break;
      case 'r': append_repr(out, v); break;
      case 'd':
      case 'i':
        if (!v.is_number())
          runtime_error("%{} format: a real number is required, not {}", t[i], v.type_name());
        out.append(std::to_string(
            v.is_float() ? static_cast<int64_t>(std::clamp(v.as_float(), -9.2e18, 9.2e18))
                         : to_int_arg(v, "%d")));
        break;
      case 'f':
        if (!v.is_number())
          runtime_error("%f format: a real number is required, not {}", v.type_name());
        out.append(fmt::format("{:.{}f}", v.to_double(), precision < 0 ? 6 : precision));
        break;
      default: runtime_error("unsupported format character '{}'", t[i]);
    }
    ev.check_size(out.size());
  }
  if (next < values.size() && !(values.size() == 1 && values[0].is_dict())) {
    runtime_error("not all arguments converted during string formatting");
  }
  return Value::string(out.take());
}

}  // namespace llamaserve::jinja
