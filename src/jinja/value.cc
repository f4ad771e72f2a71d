#include "jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "jinja/errors.h"

namespace llamaserve::jinja {

const Value* DictData::find(const Value& key) const {
  for (const auto& [k, v] : items) {
    if (values_equal(k, key)) return &v;
  }
  return nullptr;
}

Value* NamespaceData::find(std::string_view name) {
  for (auto& [k, v] : attrs) {
    if (k == name) return &v;
  }
  return nullptr;
}

Value Value::string(std::string text, Taint taint) {
  return Value(std::make_shared<const StringData>(StringData{std::move(text), std::move(taint)}));
}

Value Value::tainted_string(std::string text) {
  Taint taint;
  if (!text.empty()) taint.push_back({0, text.size()});
  return string(std::move(text), std::move(taint));
}

Value Value::string(StringData data) {
  return Value(std::make_shared<const StringData>(std::move(data)));
}

static int max_depth_of(const Value& v) { return v.depth(); }

Value Value::list(std::vector<Value> items, bool is_tuple) {
  int depth = 0;
  for (const Value& item : items) depth = std::max(depth, max_depth_of(item));
  if (depth + 1 > kMaxValueDepth) runtime_error("values nested more than {} deep", kMaxValueDepth);
  auto data = std::make_shared<ListData>();
  data->items = std::move(items);
  data->is_tuple = is_tuple;
  data->depth = depth + 1;
  return Value(List(std::move(data)));
}

Value Value::dict(std::vector<std::pair<Value, Value>> items) {
  int depth = 0;
  for (const auto& [k, v] : items) depth = std::max({depth, max_depth_of(k), max_depth_of(v)});
  if (depth + 1 > kMaxValueDepth) runtime_error("values nested more than {} deep", kMaxValueDepth);
  auto data = std::make_shared<DictData>();
  // Later keys replace earlier ones in place, as in a Python dict literal.
  for (auto& [k, v] : items) {
    bool replaced = false;
    for (auto& [dk, dv] : data->items) {
      if (values_equal(dk, k)) {
        dv = std::move(v);
        replaced = true;
        break;
      }
    }
    if (!replaced) data->items.emplace_back(std::move(k), std::move(v));
  }
  data->depth = depth + 1;
  return Value(Dict(std::move(data)));
}

Value Value::callable(std::string name, NativeFunction function) {
  return Value(
      std::make_shared<const CallableData>(CallableData{std::move(name), std::move(function)}));
}

double Value::to_double() const {
  if (is_int()) return static_cast<double>(as_int());
  if (is_bool()) return as_bool() ? 1.0 : 0.0;
  return as_float();
}

bool Value::same_object(const Value& other) const {
  if (data_.index() != other.data_.index()) return false;
  switch (data_.index()) {
    case 0:
    case 1: return true;
    case 2: return as_bool() == other.as_bool();
    case 3: return as_int() == other.as_int();
    case 4: return as_float() == other.as_float();
    case 5: return std::get<String>(data_) == std::get<String>(other.data_);
    case 6: return std::get<List>(data_) == std::get<List>(other.data_);
    case 7: return std::get<Dict>(data_) == std::get<Dict>(other.data_);
    case 8: return std::get<Namespace>(data_) == std::get<Namespace>(other.data_);
    default: return std::get<Callable>(data_) == std::get<Callable>(other.data_);
  }
}

int Value::depth() const {
  if (is_list()) return list().depth;
  if (is_dict()) return dict().depth;
  if (is_namespace()) {
    int depth = 0;
    for (const auto& [k, v] : ns().attrs) depth = std::max(depth, v.depth());
    return depth + 1;
  }
  return 0;
}

bool Value::truthy() const {
  switch (data_.index()) {
    case 0:
    case 1: return false;
    case 2: return as_bool();
    case 3: return as_int() != 0;
    case 4: return as_float() != 0.0;
    case 5: return !text().empty();
    case 6: return !list().items.empty();
    case 7: return !dict().items.empty();
    default: return true;
  }
}

std::string Value::type_name() const {
  switch (data_.index()) {
    case 0: return "Undefined";
    case 1: return "NoneType";
    case 2: return "bool";
    case 3: return "int";
    case 4: return "float";
    case 5: return "str";
    case 6: return list().is_tuple ? "tuple" : "list";
    case 7: return "dict";
    case 8: return "Namespace";
    default: return "function";
  }
}

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.to_double() == b.to_double();
    const int64_t x = a.is_bool() ? a.as_bool() : a.as_int();
    const int64_t y = b.is_bool() ? b.as_bool() : b.as_int();
    return x == y;
  }
  if (a.is_string() && b.is_string()) return a.text() == b.text();
  if (a.is_list() && b.is_list()) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    if (x.size() != y.size() || a.list().is_tuple != b.list().is_tuple) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (!values_equal(x[i], y[i])) return false;
    }
    return true;
  }
  if (a.is_dict() && b.is_dict()) {
    const auto& x = a.dict().items;
    if (x.size() != b.dict().items.size()) return false;
    for (const auto& [k, v] : x) {
      const Value* other = b.dict().find(k);
      if (other == nullptr || !values_equal(v, *other)) return false;
    }
    return true;
  }
  if (a.is_undefined() && b.is_undefined()) return true;
  if (a.is_none() && b.is_none()) return true;
  return a.same_object(b);
}

bool value_less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.to_double() < b.to_double();
    const int64_t x = a.is_bool() ? a.as_bool() : a.as_int();
    const int64_t y = b.is_bool() ? b.as_bool() : b.as_int();
    return x < y;
  }
  // UTF-8 byte order is code point order.
  if (a.is_string() && b.is_string()) return a.text() < b.text();
  if (a.is_list() && b.is_list()) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!values_equal(x[i], y[i])) return value_less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  if (a.is_undefined() || b.is_undefined()) {
    runtime_error("{}", a.is_undefined() ? a.undefined_hint() : b.undefined_hint());
  }
  runtime_error("'<' not supported between instances of '{}' and '{}'", a.type_name(),
                b.type_name());
}

void TextBuilder::add_range(size_t begin, size_t end) {
  if (begin >= end) return;
  if (!taint_.empty() && taint_.back().end >= begin) {
    taint_.back().end = std::max(taint_.back().end, end);
  } else {
    taint_.push_back({begin, end});
  }
}

void TextBuilder::append_tainted(std::string_view text) {
  const size_t begin = text_.size();
  text_.append(text);
  add_range(begin, text_.size());
}

void TextBuilder::append(const StringData& data) { append_slice(data, 0, data.text.size()); }

void TextBuilder::append_slice(const StringData& data, size_t begin, size_t end) {
  const size_t offset = text_.size();
  text_.append(data.text, begin, end - begin);
  for (const ByteRange& range : data.taint) {
    const size_t b = std::max(range.begin, begin);
    const size_t e = std::min(range.end, end);
    if (b < e) add_range(offset + b - begin, offset + e - begin);
  }
}

void TextBuilder::taint_from(size_t begin) {
  while (!taint_.empty() && taint_.back().begin >= begin) taint_.pop_back();
  add_range(begin, text_.size());
}

bool has_taint(const Value& value) {
  if (value.is_string()) return !value.str().taint.empty();
  if (value.is_list()) {
    for (const Value& item : value.list().items) {
      if (has_taint(item)) return true;
    }
  }
  if (value.is_dict()) {
    for (const auto& [k, v] : value.dict().items) {
      if (has_taint(k) || has_taint(v)) return true;
    }
  }
  return false;
}

std::string format_float(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  char buffer[64];
  const auto result =
      std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  std::string sci(buffer, result.ptr);  // "-1.2345e+02"
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exponent = std::stoi(sci.substr(e + 1));
  const int decpt = exponent + 1;
  if (decpt > -4 && decpt <= 16) {
    std::string out = sign;
    if (decpt <= 0) {
      out.append("0.");
      out.append(static_cast<size_t>(-decpt), '0');
      out.append(digits);
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out.append(digits);
      out.append(static_cast<size_t>(decpt) - digits.size(), '0');
      out.append(".0");
    } else {
      out.append(digits, 0, static_cast<size_t>(decpt));
      out.push_back('.');
      out.append(digits, static_cast<size_t>(decpt));
    }
    return out;
  }
  std::string mantissa = digits.substr(0, 1);
  if (digits.size() > 1) {
    mantissa.push_back('.');
    mantissa.append(digits, 1);
  }
  return fmt::format("{}{}e{}{:02d}", sign, mantissa, exponent < 0 ? '-' : '+',
                     exponent < 0 ? -exponent : exponent);
}

namespace {

void append_string_repr(TextBuilder& out, const StringData& data) {
  const std::string& s = data.text;
  const bool use_double = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char quote = use_double ? '"' : '\'';
  out.append(std::string_view(&quote, 1));
  const size_t begin = out.size();
  std::string body;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == quote || c == '\\') {
      body += '\\';
      body += c;
    } else if (c == '\n') {
      body += "\\n";
    } else if (c == '\r') {
      body += "\\r";
    } else if (c == '\t') {
      body += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      body += fmt::format("\\x{:02x}", u);
    } else {
      body += c;
    }
  }
  out.append(body);
  if (!data.taint.empty()) out.taint_from(begin);
  out.append(std::string_view(&quote, 1));
}

}  // namespace

void append_repr(TextBuilder& out, const Value& value) {
  if (value.is_string()) {
    append_string_repr(out, value.str());
  } else if (value.is_list()) {
    const ListData& list = value.list();
    out.append(list.is_tuple ? "(" : "[");
    for (size_t i = 0; i < list.items.size(); ++i) {
      if (i > 0) out.append(", ");
      append_repr(out, list.items[i]);
    }
    if (list.is_tuple && list.items.size() == 1) out.append(",");
    out.append(list.is_tuple ? ")" : "]");
  } else if (value.is_dict()) {
    out.append("{");
    bool first = true;
    for (const auto& [k, v] : value.dict().items) {
      if (!first) out.append(", ");
      first = false;
      append_repr(out, k);
      out.append(": ");
      append_repr(out, v);
    }
    out.append("}");
  } else {
    append_str(out, value);
  }
}

void append_str(TextBuilder& out, const Value& value) {
  if (value.is_undefined()) return;
  if (value.is_string()) return out.append(value.str());
  if (value.is_none()) return out.append("None");
  if (value.is_bool()) return out.append(value.as_bool() ? "True" : "False");
  if (value.is_int()) return out.append(std::to_string(value.as_int()));
  if (value.is_float()) return out.append(format_float(value.as_float()));
  if (value.is_namespace()) return out.append("<Namespace>");
  if (value.is_callable()) return out.append("<function " + value.callable().name + ">");
  append_repr(out, value);
}

Value to_str(const Value& value) {
  if (value.is_string()) return value;
  TextBuilder out;
  append_str(out, value);
  return Value::string(out.take());
}

}  // namespace llamaserve::jinja
