// Values of the Jinja engine, with Python's semantics where templates depend on them
// (truthiness, equality, str() and repr(), int/float arithmetic).
//
// Strings carry provenance: `taint` lists the byte ranges that came from the render's input
// variables (client text). Every operation that builds a string from others keeps the ranges
// of the bytes it copies, and marks as tainted whatever it derives from tainted bytes; literal
// text of the template is never tainted. Lists and dicts are immutable and shared; a
// Namespace is the one mutable container (jinja2's namespace()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace llamaserve::jinja {

// A byte range [begin, end) of a text.
struct ByteRange {
  size_t begin = 0;
  size_t end = 0;
  bool operator==(const ByteRange&) const = default;
};
using Taint = std::vector<ByteRange>;  // sorted, non-overlapping, non-adjacent, non-empty

class Value;
class Evaluator;

struct StringData {
  std::string text;
  Taint taint;
};

struct ListData {
  std::vector<Value> items;
  bool is_tuple = false;
  int depth = 1;  // nesting depth of containers, bounded (kMaxValueDepth)
};

struct DictData {
  std::vector<std::pair<Value, Value>> items;  // insertion order, as Python dicts
  int depth = 1;
  const Value* find(const Value& key) const;
};

// jinja2's namespace(): attributes assigned with {% set ns.name = value %}.
struct NamespaceData {
  std::vector<std::pair<std::string, Value>> attrs;
  Value* find(std::string_view name);
};

struct Arguments;
using NativeFunction = std::function<Value(Evaluator&, Arguments&)>;
struct CallableData {
  std::string name;
  NativeFunction function;
};

struct Undefined {
  std::string hint;  // the message of the error raised where an undefined value cannot be used
};
struct None {};

// Nesting deeper than this is refused, so that printing, comparing and destroying values never
// recurses without bound.
inline constexpr int kMaxValueDepth = 200;

class Value {
 public:
  using String = std::shared_ptr<const StringData>;
  using List = std::shared_ptr<const ListData>;
  using Dict = std::shared_ptr<const DictData>;
  using Namespace = std::shared_ptr<NamespaceData>;
  using Callable = std::shared_ptr<const CallableData>;

  Value() : data_(Undefined{}) {}
  static Value undefined(std::string hint) { return Value(Undefined{std::move(hint)}); }
  static Value none() { return Value(None{}); }
  static Value boolean(bool b) { return Value(b); }
  static Value integer(int64_t i) { return Value(i); }
  static Value number(double f) { return Value(f); }
  static Value string(std::string text, Taint taint = {});
  static Value tainted_string(std::string text);  // all of it from the input
  static Value string(StringData data);
  static Value list(std::vector<Value> items, bool is_tuple = false);
  static Value dict(std::vector<std::pair<Value, Value>> items);
  static Value new_namespace() { return Value(std::make_shared<NamespaceData>()); }
  static Value callable(std::string name, NativeFunction function);

  bool is_undefined() const { return data_.index() == 0; }
  bool is_none() const { return data_.index() == 1; }
  bool is_bool() const { return data_.index() == 2; }
  bool is_int() const { return data_.index() == 3; }
  bool is_float() const { return data_.index() == 4; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return data_.index() == 5; }
  bool is_list() const { return data_.index() == 6; }
  bool is_dict() const { return data_.index() == 7; }
  bool is_namespace() const { return data_.index() == 8; }
  bool is_callable() const { return data_.index() == 9; }

  const std::string& undefined_hint() const { return std::get<Undefined>(data_).hint; }
  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return std::get<int64_t>(data_); }
  double as_float() const { return std::get<double>(data_); }
  // An int, a float or a bool as a double.
  double to_double() const;
  const StringData& str() const { return *std::get<String>(data_); }
  const std::string& text() const { return str().text; }
  const ListData& list() const { return *std::get<List>(data_); }
  const DictData& dict() const { return *std::get<Dict>(data_); }
  NamespaceData& ns() const { return *std::get<Namespace>(data_); }
  const CallableData& callable() const { return *std::get<Callable>(data_); }
  bool same_object(const Value& other) const;

  int depth() const;
  // Python's bool(): empty strings and containers, 0, None and undefined are false.
  bool truthy() const;
  // "str", "int", "dict"... as Python names them, for error messages.
  std::string type_name() const;

 private:
  using Data =
      std::variant<Undefined, None, bool, int64_t, double, String, List, Dict, Namespace, Callable>;
  template <typename T>
  explicit Value(T data) : data_(std::move(data)) {}
  Data data_;
};

struct Arguments {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  int line = 0;
};

// Python's ==, with 1 == 1.0 == True; strings compare by text (provenance aside).
bool values_equal(const Value& a, const Value& b);
// Python's <, for numbers, strings and lists; throws for other pairs.
bool value_less(const Value& a, const Value& b);

// Builds a string piece by piece, keeping the provenance of what it appends.
class TextBuilder {
 public:
  void append(std::string_view text) { text_.append(text); }
  void append_tainted(std::string_view text);
  void append(const StringData& data);
  // Appends data.text[begin, end) with its provenance.
  void append_slice(const StringData& data, size_t begin, size_t end);
  // Marks every byte appended since `begin` as tainted.
  void taint_from(size_t begin);
  size_t size() const { return text_.size(); }
  const std::string& text() const { return text_; }
  const Taint& taint() const { return taint_; }
  StringData take() { return {std::move(text_), std::move(taint_)}; }

 private:
  void add_range(size_t begin, size_t end);
  std::string text_;
  Taint taint_;
};

bool has_taint(const Value& value);  // any tainted string in it (recursively)

// Python's str(value) (undefined → ""), appended to `out`; strings keep their provenance,
// and the repr of a tainted string inside a container is tainted.
void append_str(TextBuilder& out, const Value& value);
Value to_str(const Value& value);
// Python's repr(value), as str() of a container prints its items.
void append_repr(TextBuilder& out, const Value& value);
// Python's repr() of a float: the shortest text that reads back the same, "1.0", "1e-05".
std::string format_float(double value);

}  // namespace llamaserve::jinja
