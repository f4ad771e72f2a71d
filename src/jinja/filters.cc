// jinja2's built-in filters, as chat templates use them.
#include <algorithm>
#include <cmath>
#include <functional>
#include <unordered_map>

#include "jinja/builtins.h"
#include "jinja/errors.h"
#include "jinja/text_ops.h"

namespace llamaserve::jinja {
namespace {

using Filter = Value (*)(Evaluator&, const Value&, Arguments&);

const StringData& as_text(const Value& v, Value& holder) {
  holder = to_str(v);
  return holder.str();
}

size_t length_of(const Value& v) {
  if (v.is_string()) return code_point_count(v.text());
  if (v.is_list()) return v.list().items.size();
  if (v.is_dict()) return v.dict().items.size();
  if (v.is_undefined()) return 0;
  if (v.is_namespace()) return v.ns().attrs.size();
  runtime_error("object of type '{}' has no len()", v.type_name());
}

// jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0.
Value get_path(const Value& item, const std::string& path) {
  Value v = item;
  size_t begin = 0;
  while (begin <= path.size()) {
    const size_t dot = path.find('.', begin);
    const std::string part =
        path.substr(begin, dot == std::string::npos ? std::string::npos : dot - begin);
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(),
                                                      [](char c) { return c >= '0' && c <= '9'; });
    if (v.is_undefined()) return v;
    v = numeric ? get_item(v, Value::integer(std::stoll(part.substr(0, 18))))
                : get_item(v, Value::string(part));
    if (dot == std::string::npos) break;
    begin = dot + 1;
  }
  return v;
}

Value f_abs(Evaluator&, const Value& v, Arguments&) {
  if (v.is_float()) return Value::number(std::fabs(v.as_float()));
  if (v.is_int()) {
    if (v.as_int() == INT64_MIN) runtime_error("integer overflow");
    return Value::integer(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  if (v.is_bool()) return Value::integer(v.as_bool());
  runtime_error("bad operand type for abs(): '{}'", v.type_name());
}

Value f_attr(Evaluator&, const Value& v, Arguments& a) {
  ArgReader r("attr", a, {"name"});
  return get_attribute(v, to_text_arg(r.get_or(0, Value::string("")), "name"));
}

Value f_batch(Evaluator& ev, const Value& v, Arguments& a) {
  ArgReader r("batch", a, {"linecount", "fill_with"});
  const int64_t n = to_int_arg(r.get_or(0, Value::integer(1)), "linecount");
  if (n <= 0) runtime_error("batch: linecount must be positive");
  const std::optional<Value> fill = r.get(1);
  std::vector<Value> out;
  std::vector<Value> current;
  for (const Value& item : iterable_items(v)) {
    ev.step();
    current.push_back(item);
    if (static_cast<int64_t>(current.size()) == n) {
      out.push_back(Value::list(std::move(current)));
      current.clear();
    }
  }
  if (!current.empty()) {
    if (fill && !fill->is_none()) {
      while (static_cast<int64_t>(current.size()) < n) current.push_back(*fill);
    }
    out.push_back(Value::list(std::move(current)));
  }
  return Value::list(std::move(out));
}

Value f_capitalize(Evaluator&, const Value& v, Arguments&) {
  Value h;
  return Value::string(map_case(as_text(v, h), CaseMap::kCapitalize));
}

Value f_center(Evaluator& ev, const Value& v, Arguments& a) {
  ArgReader r("center", a, {"width"});
  Value h;
  const StringData& s = as_text(v, h);
  const int64_t width = to_int_arg(r.get_or(0, Value::integer(80)), "width");
  const int64_t len = static_cast<int64_t>(code_point_count(s.text));
  if (width <= len) return Value::string(s);
  ev.check_size(static_cast<size_t>(width));
  const int64_t pad = width - len;
  // Python's str.center puts the odd space on the right when the width is even... as it does.
  const int64_t left = pad / 2 + (pad & width & 1);
  TextBuilder out;
  out.append(std::string(static_cast<size_t>(left), ' '));
  out.append(s);
  out.append(std::string(static_cast<size_t>(pad - left), ' '));
  return Value::string(out.take());
}

Value f_length(Evaluator&, const Value& v, Arguments&) {
  return Value::integer(static_cast<int64_t>(length_of(v)));
}

Value f_default(Evaluator&, const Value& v, Arguments& a) {
  ArgReader r("default", a, {"default_value", "boolean"});
  const bool boolean = r.get_or(1, Value::boolean(false)).truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) return r.get_or(0, Value::string(""));
  return v;
}

Value f_dictsort(Evaluator& ev, const Value& v, Arguments& a) {
  ArgReader r("dictsort", a, {"case_sensitive", "by", "reverse"});
  if (!v.is_dict()) runtime_error("You can only sort by either 'key' or 'value'");
  const bool case_sensitive = r.get_or(0, Value::boolean(false)).truthy();
  const std::string by = to_text_arg(r.get_or(1, Value::string("key")), "by");
  const bool reverse = r.get_or(2, Value::boolean(false)).truthy();
  if (by != "key" && by != "value") runtime_error("You can only sort by either 'key' or 'value'");
  std::vector<std::pair<Value, Value>> items = v.dict().items;
  ev.step(items.size());
  auto key_of = [&](const std::pair<Value, Value>& p) {
    const Value& k = by == "key" ? p.first : p.second;
    if (!case_sensitive && k.is_string()) return Value::string(map_case(k.str(), CaseMap::kLower));
    return k;
  };
  std::stable_sort(items.begin(), items.end(), [&](const auto& x, const auto& y) {
    return reverse ? value_less(key_of(y), key_of(x)) : value_less(key_of(x), key_of(y));
  });
  std::vector<Value> out;
  for (auto& [k, val] : items) out.push_back(Value::list({k, val}, true));
  return Value::list(std::move(out));
}

Value f_escape(Evaluator& ev, const Value& v, Arguments&) {
  Value h;
  const StringData& s = as_text(v, h);
  TextBuilder out;
  size_t begin = 0;
  for (size_t i = 0; i < s.text.size(); ++i) {
    const char* rep = nullptr;
    switch (s.text[i]) {
      case '&': rep = "&amp;"; break;
      case '<': rep = "&lt;"; break;
      case '>': rep = "&gt;"; break;
      case '"': rep = "&#34;"; break;
      case '\'': rep = "&#39;"; break;
      default: break;
    }
    if (rep == nullptr) continue;
    out.append_slice(s, begin, i);
    const size_t at = out.size();
    out.append(rep);
    for (const ByteRange& range : s.taint) {
      if (range.begin <= i && i < range.end) out.taint_from(at);
    }
    begin = i + 1;
  }
  out.append_slice(s, begin, s.text.size());
  ev.check_size(out.size());
  return Value::string(out.take());
}

Value f_first(Evaluator&, const Value& v, Arguments&) {
  const std::vector<Value> items = iterable_items(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(Evaluator&, const Value& v, Arguments&) {
  const std::vector<Value> items = iterable_items(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

std::optional<double> parse_float(const std::string& text) {
  const std::string t = strip_text({text, {}}, StripSide::kBoth, std::nullopt).text;
  if (t.empty()) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return d;
}

Value f_float(Evaluator&, const Value& v, Arguments& a) {
  ArgReader r("float", a, {"default"});
  if (v.is_number()) return Value::number(v.to_double());
  if (v.is_string()) {
    if (const std::optional<double> d = parse_float(v.text())) return Value::number(*d);
  }
  return r.get_or(0, Value::number(0.0));
}

Value f_int(Evaluator&, const Value& v, Arguments& a) {
  ArgReader r("int", a, {"default", "base"});
  const Value fallback = r.get_or(0, Value::integer(0));
  if (v.is_int()) return v;
  if (v.is_bool()) return Value::integer(v.as_bool());
  if (v.is_float()) {
    if (!std::isfinite(v.as_float()) || std::fabs(v.as_float()) > 9.2e18) return fallback;
    return Value::integer(static_cast<int64_t>(v.as_float()));
  }
  if (v.is_string()) {
    const int64_t base = to_int_arg(r.get_or(1, Value::integer(10)), "base");
    std::string t = strip_text(v.str(), StripSide::kBoth, std::nullopt).text;
    t.erase(std::remove(t.begin(), t.end(), '_'), t.end());
    if (!t.empty() && base >= 2 && base <= 36) {
      errno = 0;
      char* end = nullptr;
      const long long i = std::strtoll(t.c_str(), &end, static_cast<int>(base));
      if (end == t.c_str() + t.size() && errno == 0) return Value::integer(i);
    }
    if (const std::optional<double> d = parse_float(v.text())) {
      if (std::isfinite(*d) && std::fabs(*d) < 9.2e18)
        return Value::integer(static_cast<int64_t>(*d));
    }
  }
  return fallback;
}

Value f_format(Evaluator& ev, const Value& v, Arguments& a) {
  if (!a.keyword.empty() && !a.positional.empty()) {
    runtime_error("can't handle positional and keyword arguments at the same time");
  }
  return format_percent(ev, to_str(v), Value::list(a.positional, true));
}

Value f_indent(Evaluator& ev, const Value& v, Arguments& a) {
  ArgReader r("indent", a, {"width", "first", "blank"});
  const Value width_arg = r.get_or(0, Value::integer(4));
  std::string pad =
      width_arg.is_string()
          ? width_arg.text()
          : std::string(
                static_cast<size_t>(std::clamp<int64_t>(to_int_arg(width_arg, "width"), 0, 4096)),
                ' ');
  const bool first = r.get_or(1, Value::boolean(false)).truthy();
  const bool blank = r.get_or(2, Value::boolean(false)).truthy();
  Value h;
  const StringData& s = as_text(v, h);
  // jinja2: (s + "\n").splitlines(), the first line as is, the others indented unless empty
  // (blank=True indents those too), the first too with first=True.
  std::vector<std::pair<size_t, size_t>> lines;
  for (size_t begin = 0; begin < s.text.size() + 1;) {
    size_t end = s.text.find('\n', begin);
    if (end == std::string::npos) end = s.text.size();
    lines.emplace_back(begin, end);
    begin = end + 1;
  }
  TextBuilder out;
  if (first) out.append(pad);
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto [b, e] = lines[i];
    if (i > 0) {
      out.append("\n");
      if (blank || e > b) out.append(pad);
    }
    out.append_slice(s, b, e);
    ev.check_size(out.size());
  }
  return Value::string(out.take());
}

Value f_items(Evaluator&, const Value& v, Arguments&) {
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict()) runtime_error("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, val] : v.dict().items) out.push_back(Value::list({k, val}, true));
  return Value::list(std::move(out));
}

Value f_join(Evaluator& ev, const Value& v, Arguments& a) {
  ArgReader r("join", a, {"d", "attribute"});
  const Value sep = to_str(r.get_or(0, Value::string("")));
  const std::optional<Value> attribute = r.get(1);
  TextBuilder out;
  bool first = true;
  for (const Value& item : iterable_items(v)) {
    ev.step();
    if (!first) out.append(sep.str());
    first = false;
    append_str(out, attribute ? get_path(item, to_str(*attribute).text()) : item);
    ev.check_size(out.size());
  }
  return Value::string(out.take());
}

Value f_list(Evaluator&, const Value& v, Arguments&) { return Value::list(iterable_items(v)); }

Value f_lower(Evaluator&, const Value& v, Arguments&) {
  Value h;
  return Value::string(map_case(as_text(v, h), CaseMap::kLower));
}

Value f_upper(Evaluator&, const Value& v, Arguments&) {
  Value h;
  return Value::string(map_case(as_text(v, h), CaseMap::kUpper));
}

Value f_title(Evaluator&, const Value& v, Arguments&) {
  Value h;
  return Value::string(map_case(as_text(v, h), CaseMap::kTitle));
}

Value f_trim(Evaluator&, const Value& v, Arguments& a) {
  ArgReader r("trim", a, {"chars"});
  Value h;
  const std::optional<Value> chars = r.get(0);
  std::optional<std::string> set;
  if (chars && !chars->is_none()) set = to_text_arg(*chars, "chars");
  return Value::string(strip_text(as_text(v, h), StripSide::kBoth, set));
}

Value f_replace(Evaluator& ev, const Value& v, Arguments& a) {
  ArgReader r("replace", a, {"old", "new", "count"});
  Value h;
  const StringData& s = as_text(v, h);
  const std::optional<Value> old_arg = r.get(0);
  const std::optional<Value> new_arg = r.get(1);
  if (!old_arg || !new_arg) runtime_error("replace() takes at least 2 arguments");
  const Value replacement = to_str(*new_arg);
  const std::optional<Value> count = r.get(2);
  const int64_t n = count && !count->is_none() ? to_int_arg(*count, "count") : -1;
  const std::string from = to_str(*old_arg).text();
  const size_t hits = from.empty() ? code_point_count(s.text) + 1 : 0;
  (void)hits;
  StringData out = replace_text(s, from, replacement.str(), n);
  ev.check_size(out.text.size());
  return Value::string(std::move(out));
}

// Applies a test or an attribute test to each item: select/reject/selectattr/rejectattr.
Value select_items(Evaluator& ev, const Value& v, Arguments& a, bool by_attribute, bool keep) {
  std::vector<Value> positional = a.positional;
  std::string attribute;
  if (by_attribute) {
    if (positional.empty()) runtime_error("selectattr/rejectattr need an attribute name");
    attribute = to_text_arg(positional.front(), "attribute");
    positional.erase(positional.begin());
  }
  std::optional<std::string> test;
  if (!positional.empty()) {
    test = to_text_arg(positional.front(), "test");
    positional.erase(positional.begin());
    if (!is_known_test(*test)) runtime_error("No test named '{}'.", *test);
  }
  std::vector<Value> out;
  for (const Value& item : iterable_items(v)) {
    ev.step();
    const Value subject = by_attribute ? get_path(item, attribute) : item;
    bool result;
    if (test) {
      Arguments args;
      args.positional = positional;
      args.line = a.line;
      result = ev.apply_test(*test, subject, args);
    } else {
      result = subject.truthy();
    }
    if (result == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value f_select(Evaluator& ev, const Value& v, Arguments& a) {
  return select_items(ev, v, a, false, true);
}
Value f_reject(Evaluator& ev, const Value& v, Arguments& a) {
  return select_items(ev, v, a, false, false);
}
Value f_selectattr(Evaluator& ev, const Value& v, Arguments& a) {
  return select_items(ev, v, a, true, true);
}
Value f_rejectattr(Evaluator& ev, const Value& v, Arguments& a) {
  return select_items(ev, v, a, true, false);
}

Value f_map(Evaluator& ev, const Value& v, Arguments& a) {
  std::optional<std::string> attribute;
  std::optional<Value> fallback;
  for (const auto& [name, value] : a.keyword) {
    if (name == "attribute") attribute = to_text_arg(value, "attribute");
    if (name == "default") fallback = value;
  }
  std::vector<Value> out;
  if (attribute) {
    for (const Value& item : iterable_items(v)) {
      ev.step();
      Value got = get_path(item, *attribute);
      if (got.is_undefined() && fallback) got = *fallback;
      out.push_back(std::move(got));
    }
    return Value::list(std::move(out));
  }
  if (a.positional.empty()) runtime_error("map requires a filter argument");
  const std::string filter = to_text_arg(a.positional.front(), "filter");
  if (!is_known_filter(filter)) runtime_error("No filter named '{}'.", filter);
  for (const Value& item : iterable_items(v)) {
    ev.step();
    Arguments args;
    args.positional.assign(a.positional.begin() + 1, a.positional.end());
    args.line = a.line;
    out.push_back(ev.apply_filter(filter, item, args));
  }
  return Value::list(std::move(out));
}

Value sort_key(const Value& item, const std::optional<std::string>& attribute,
               bool case_sensitive) {
  Value k = attribute ? get_path(item, *attribute) : item;
  if (!case_sensitive && k.is_string()) return Value::string(map_case(k.str(), CaseMap::kLower));
  return k;
}

Value f_sort(Evaluator& ev, const Value& v, Arguments& a) {
  ArgReader r("sort", a, {"reverse", "case_sensitive", "attribute"});
  const bool reverse = r.get_or(0, Value::boolean(false)).truthy();
  const bool case_sensitive = r.get_or(1, Value::boolean(false)).truthy();
  std::optional<std::string> attribute;
  if (const std::optional<Value> at = r.get(2); at && !at->is_none())
    attribute = to_str(*at).text();
  std::vector<Value> items = iterable_items(v);
  ev.step(items.size());
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    const Value kx = sort_key(x, attribute, case_sensitive);
    const Value ky = sort_key(y, attribute, case_sensitive);
    return reverse ? value_less(ky, kx) : value_less(kx, ky);
  });
  return Value::list(std::move(items));
}

Value min_max(Evaluator& ev, const Value& v, Arguments& a, bool want_max) {
  ArgReader r(want_max ? "max" : "min", a, {"case_sensitive", "attribute"});
  const bool case_sensitive = r.get_or(0, Value::boolean(false)).truthy();
  std::optional<std::string> attribute;
  if (const std::optional<Value> at = r.get(1); at && !at->is_none())
    attribute = to_str(*at).text();
  const std::vector<Value> items = iterable_items(v);
  ev.step(items.size());
  if (items.empty())
    return Value::undefined(fmt::format("No aggregated item, sequence was empty."));
  const Value* best = &items[0];
  for (const Value& item : items) {
    const Value k = sort_key(item, attribute, case_sensitive);
    const Value kb = sort_key(*best, attribute, case_sensitive);
    if (want_max ? value_less(kb, k) : value_less(k, kb)) best = &item;
  }
  return *best;
}

Value f_max(Evaluator& ev, const Value& v, Arguments& a) { return min_max(ev, v, a, true); }
Value f_min(Evaluator& ev, const Value& v, Arguments& a) { return min_max(ev, v, a, false); }

Value f_reverse(Evaluator&, const Value& v, Arguments&) {
  if (v.is_string()) {
    const int64_t n = static_cast<int64_t>(code_point_count(v.text()));
    return Value::string(slice_text(v.str(), slice_positions(n, std::nullopt, std::nullopt, -1)));
  }
  std::vector<Value> items = iterable_items(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_round(Evaluator&, const Value& v, Arguments& a) {
  ArgReader r("round", a, {"precision", "method"});
  const int64_t precision =
      std::clamp<int64_t>(to_int_arg(r.get_or(0, Value::integer(0)), "precision"), -300, 300);
  const std::string method = to_text_arg(r.get_or(1, Value::string("common")), "method");
  if (!v.is_number()) runtime_error("round: expected a number, got {}", v.type_name());
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.to_double() * scale;
  double rounded;
  if (method == "common") {
    rounded = std::round(x);
  } else if (method == "ceil") {
    rounded = std::ceil(x);
  } else if (method == "floor") {
    rounded = std::floor(x);
  } else {
    runtime_error("method must be common, ceil or floor");
  }
  return Value::number(rounded / scale);
}

Value f_safe(Evaluator&, const Value& v, Arguments&) { return to_str(v); }

Value f_string(Evaluator&, const Value& v, Arguments&) { return to_str(v); }

Value f_sum(Evaluator& ev, const Value& v, Arguments& a) {
  ArgReader r("sum", a, {"attribute", "start"});
  std::optional<std::string> attribute;
  if (const std::optional<Value> at = r.get(0); at && !at->is_none())
    attribute = to_str(*at).text();
  Value total = r.get_or(1, Value::integer(0));
  for (const Value& item : iterable_items(v)) {
    ev.step();
    total = binary_operator(ev, "+", total, attribute ? get_path(item, *attribute) : item);
  }
  return total;
}

Value f_tojson(Evaluator& ev, const Value& v, Arguments& a) {
  ArgReader r("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"});
  if (r.get_or(0, Value::boolean(false)).truthy()) {
    runtime_error("tojson: ensure_ascii=True is not supported");
  }
  JsonOptions options;
  if (const std::optional<Value> indent = r.get(1); indent && !indent->is_none()) {
    if (indent->is_string()) {
      options.indent = indent->text();
    } else {
      options.indent = std::string(
          static_cast<size_t>(std::clamp<int64_t>(to_int_arg(*indent, "indent"), 0, 64)), ' ');
    }
    options.item_separator.assign(1, ',');  // json.dumps with an indent
  }
  if (const std::optional<Value> separators = r.get(2); separators && !separators->is_none()) {
    if (!separators->is_list() || separators->list().items.size() != 2) {
      runtime_error("tojson: separators must be a pair of strings");
    }
    options.item_separator = to_text_arg(separators->list().items[0], "separators");
    options.key_separator = to_text_arg(separators->list().items[1], "separators");
  }
  options.sort_keys = r.get_or(3, Value::boolean(false)).truthy();
  TextBuilder out;
  append_json(out, v, options);
  ev.check_size(out.size());
  return Value::string(out.take());
}

Value f_unique(Evaluator& ev, const Value& v, Arguments& a) {
  ArgReader r("unique", a, {"case_sensitive", "attribute"});
  const bool case_sensitive = r.get_or(0, Value::boolean(false)).truthy();
  std::optional<std::string> attribute;
  if (const std::optional<Value> at = r.get(1); at && !at->is_none())
    attribute = to_str(*at).text();
  std::vector<Value> out;
  std::vector<Value> seen;
  for (const Value& item : iterable_items(v)) {
    const Value k = sort_key(item, attribute, case_sensitive);
    ev.step(seen.size() + 1);
    if (std::none_of(seen.begin(), seen.end(),
                     [&](const Value& s) { return values_equal(s, k); })) {
      seen.push_back(k);
      out.push_back(item);
    }
  }
  return Value::list(std::move(out));
}

Value f_wordcount(Evaluator&, const Value& v, Arguments&) {
  Value h;
  return Value::integer(static_cast<int64_t>(split_text(as_text(v, h), std::nullopt, -1).size()));
}

const std::unordered_map<std::string_view, Filter>& filters() {
  static const std::unordered_map<std::string_view, Filter> table = {
      {"abs", f_abs},
      {"attr", f_attr},
      {"batch", f_batch},
      {"capitalize", f_capitalize},
      {"center", f_center},
      {"count", f_length},
      {"d", f_default},
      {"default", f_default},
      {"dictsort", f_dictsort},
      {"e", f_escape},
      {"escape", f_escape},
      {"forceescape", f_escape},
      {"first", f_first},
      {"float", f_float},
      {"format", f_format},
      {"indent", f_indent},
      {"int", f_int},
      {"items", f_items},
      {"join", f_join},
      {"last", f_last},
      {"length", f_length},
      {"list", f_list},
      {"lower", f_lower},
      {"map", f_map},
      {"max", f_max},
      {"min", f_min},
      {"reject", f_reject},
      {"rejectattr", f_rejectattr},
      {"replace", f_replace},
      {"reverse", f_reverse},
      {"round", f_round},
      {"safe", f_safe},
      {"select", f_select},
      {"selectattr", f_selectattr},
      {"sort", f_sort},
      {"string", f_string},
      {"sum", f_sum},
      {"title", f_title},
      {"tojson", f_tojson},
      {"trim", f_trim},
      {"unique", f_unique},
      {"upper", f_upper},
      {"wordcount", f_wordcount},
  };
  return table;
}

}  // namespace

bool is_known_filter(std::string_view name) { return filters().contains(name); }

Value call_filter(Evaluator& ev, const std::string& name, const Value& input, Arguments& args) {
  const auto it = filters().find(name);
  if (it == filters().end()) runtime_error("No filter named '{}'.", name);
  return it->second(ev, input, args);
}

}  // namespace llamaserve::jinja
