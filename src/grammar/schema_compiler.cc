#include "grammar/schema_compiler.h"

#include <cmath>
#include <set>
#include <string>
#include <unordered_map>

#include "grammar/regex.h"

namespace llamaserve::grammar {
namespace {

using json = nlohmann::ordered_json;

// Keywords that describe a schema without constraining its values.
const std::set<std::string, std::less<>> kAnnotations = {
    "title",    "description", "default",  "examples",     "$schema",         "$id",
    "$comment", "deprecated",  "readOnly", "writeOnly",    "contentEncoding", "contentMediaType",
    "$defs",    "definitions", "format",   "discriminator"};

const std::set<std::string, std::less<>> kSupported = {"type",
                                                       "properties",
                                                       "required",
                                                       "additionalProperties",
                                                       "items",
                                                       "minItems",
                                                       "maxItems",
                                                       "enum",
                                                       "const",
                                                       "anyOf",
                                                       "oneOf",
                                                       "allOf",
                                                       "$ref",
                                                       "minLength",
                                                       "maxLength",
                                                       "pattern",
                                                       "minimum",
                                                       "maximum",
                                                       "exclusiveMinimum",
                                                       "exclusiveMaximum"};

// Formats enforced as patterns; other formats are annotations.
const char* format_pattern(std::string_view format) {
  if (format == "date") return "^\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])$";
  if (format == "time") {
    return "^([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(\\.\\d{1,6})?(Z|[+-]([01]\\d|2[0-3]):[0-5]\\d)$";
  }
  if (format == "date-time") {
    return "^\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])T([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d"
           "(\\.\\d{1,6})?(Z|[+-]([01]\\d|2[0-3]):[0-5]\\d)$";
  }
  if (format == "uuid") {
    return "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$";
  }
  if (format == "ipv4") {
    return "^((25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)\\.){3}(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)$";
  }
  return nullptr;
}

std::string where(const std::string& path) { return path.empty() ? "/" : path; }

Status unsupported(const std::string& path, std::string what) {
  return make_error(StatusCode::kUnsupported, "{} at {}", what, where(path));
}

Status invalid(const std::string& path, std::string what) {
  return make_error(StatusCode::kInvalidArgument, "{} at {}", what, where(path));
}

std::string escape_pointer(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

class Compiler {
 public:
  Compiler(const json& root, const CompileOptions& options) : root_(root), options_(options) {}

  Result<Grammar> compile_schema() {
    LS_ASSIGN_OR_RETURN(StateId start, rule(root_, ""));
    return b_.finish(start, options_.limits);
  }

  Result<Grammar> compile_any_object() {
    const StateId start = any_object();
    return b_.finish(start, options_.limits);
  }

 private:
  Status check_size(const std::string& path) {
    if (b_.over_limit(options_.limits)) {
      return make_error(StatusCode::kOutOfRange,
                        "the schema needs more than {} automaton states (at {})",
                        options_.limits.max_states, where(path));
    }
    return Status::ok();
  }

  // --- building blocks -------------------------------------------------------------------

  StateId ws_rule() {
    if (ws_ != kNoState) return ws_;
    ws_ = b_.add_state();
    StateId at = ws_;
    b_.set_accept(at);
    for (int32_t k = 0; k < options_.max_whitespace; ++k) {
      const StateId next = b_.add_state();
      b_.set_accept(next);
      b_.add_bytes(at, '\t', '\n', next);
      b_.add_bytes(at, '\r', '\r', next);
      b_.add_bytes(at, ' ', ' ', next);
      at = next;
    }
    return ws_;
  }

  // Optional whitespace after `from`; returns the state after it.
  StateId ws(StateId from) {
    if (options_.max_whitespace <= 0) return from;
    return call(from, ws_rule());
  }

  StateId call(StateId from, StateId callee) {
    const StateId resume = b_.add_state();
    b_.add_call(from, callee, resume);
    return resume;
  }

  StateId literal_rule(std::string_view text) {
    const StateId start = b_.add_state();
    b_.set_accept(b_.add_literal(start, text));
    return start;
  }

  // One character of a JSON string body from `from` to `to`: a plain byte, a UTF-8 sequence,
  // or an escape.
  void add_string_char(StateId from, StateId to) {
    b_.add_bytes(from, 0x20, 0x21, to);
    b_.add_bytes(from, 0x23, 0x5B, to);
    b_.add_bytes(from, 0x5D, 0x7F, to);
    b_.add_utf8_multibyte(from, to);
    const StateId escape = b_.add_state();
    b_.add_bytes(from, '\\', '\\', escape);
    for (char c : {'"', '\\', '/', 'b', 'f', 'n', 'r', 't'}) {
      b_.add_bytes(escape, static_cast<uint8_t>(c), static_cast<uint8_t>(c), to);
    }
    StateId at = b_.add_state();
    b_.add_bytes(escape, 'u', 'u', at);
    for (int k = 0; k < 4; ++k) {
      const StateId next = k == 3 ? to : b_.add_state();
      b_.add_bytes(at, '0', '9', next);
      b_.add_bytes(at, 'A', 'F', next);
      b_.add_bytes(at, 'a', 'f', next);
      at = next;
    }
  }

  // A string of min..max characters (max < 0: unbounded), quotes included, from `start`.
  void string_body(StateId start, int64_t min_length, int64_t max_length) {
    const StateId end = b_.add_state();
    b_.set_accept(end);
    StateId at = b_.add_state();
    b_.add_bytes(start, '"', '"', at);
    const int64_t counted = max_length >= 0 ? max_length : min_length;
    for (int64_t k = 0;; ++k) {
      if (k >= min_length) b_.add_bytes(at, '"', '"', end);
      if (max_length >= 0) b_.set_plain_budget(at, static_cast<int32_t>(max_length - k));
      if (k == counted) break;
      const StateId next = b_.add_state();
      add_string_char(at, next);
      at = next;
    }
    if (max_length < 0) {
      add_string_char(at, at);
      b_.set_plain_budget(at, GrammarBuilder::kUnbounded);
    }
  }

  StateId free_string() {
    if (free_string_ != kNoState) return free_string_;
    free_string_ = b_.add_state();
    string_body(free_string_, 0, -1);
    return free_string_;
  }

  // Digits: between min and max of them from `from`, then on to `to`.
  void digits(StateId from, int32_t min, int32_t max, StateId to) {
    if (min == 0) b_.add_epsilon(from, to);
    StateId at = from;
    for (int32_t k = 1; k <= max; ++k) {
      const StateId next = b_.add_state();
      b_.add_bytes(at, '0', '9', next);
      if (k >= min) b_.add_epsilon(next, to);
      at = next;
    }
  }

  // -?(0|[1-9][0-9]*) with at most max_integer_digits digits, from `from` to `to`.
  void free_integer_body(StateId from, StateId to) {
    const StateId sign = b_.add_state();
    b_.add_epsilon(from, sign);
    b_.add_bytes(from, '-', '-', sign);
    b_.add_bytes(sign, '0', '0', to);
    const StateId first = b_.add_state();
    b_.add_bytes(sign, '1', '9', first);
    digits(first, 0, options_.max_integer_digits - 1, to);
  }

  StateId free_number() {
    if (free_number_ != kNoState) return free_number_;
    free_number_ = b_.add_state();
    const StateId end = b_.add_state();
    b_.set_accept(end);
    const StateId integer_done = b_.add_state();
    free_integer_body(free_number_, integer_done);
    const StateId before_exponent = b_.add_state();
    b_.add_epsilon(integer_done, before_exponent);
    const StateId point = b_.add_state();
    b_.add_bytes(integer_done, '.', '.', point);
    digits(point, 1, options_.max_fraction_digits, before_exponent);
    b_.add_epsilon(before_exponent, end);
    const StateId e = b_.add_state();
    b_.add_bytes(before_exponent, 'E', 'E', e);
    b_.add_bytes(before_exponent, 'e', 'e', e);
    const StateId sign = b_.add_state();
    b_.add_epsilon(e, sign);
    b_.add_bytes(e, '+', '+', sign);
    b_.add_bytes(e, '-', '-', sign);
    digits(sign, 1, 3, end);
    return free_number_;
  }

  // Decimal strings of equal length, lo <= hi, first digits not '0' unless length 1.
  void uint_range_same_length(StateId from, const std::string& lo, const std::string& hi,
                              StateId to) {
    const size_t n = lo.size();
    if (n == 1) {
      b_.add_bytes(from, static_cast<uint8_t>(lo[0]), static_cast<uint8_t>(hi[0]), to);
      return;
    }
    const std::string rest_lo = lo.substr(1);
    const std::string rest_hi = hi.substr(1);
    if (lo[0] == hi[0]) {
      const StateId next = b_.add_state();
      b_.add_bytes(from, static_cast<uint8_t>(lo[0]), static_cast<uint8_t>(lo[0]), next);
      uint_range_same_length(next, rest_lo, rest_hi, to);
      return;
    }
    const std::string nines(n - 1, '9');
    const std::string zeros(n - 1, '0');
    if (rest_lo == zeros && rest_hi == nines) {
      const StateId next = b_.add_state();
      b_.add_bytes(from, static_cast<uint8_t>(lo[0]), static_cast<uint8_t>(hi[0]), next);
      digits(next, static_cast<int32_t>(n - 1), static_cast<int32_t>(n - 1), to);
      return;
    }
    StateId next = b_.add_state();
    b_.add_bytes(from, static_cast<uint8_t>(lo[0]), static_cast<uint8_t>(lo[0]), next);
    uint_range_same_length(next, rest_lo, nines, to);
    if (hi[0] - lo[0] > 1) {
      next = b_.add_state();
      b_.add_bytes(from, static_cast<uint8_t>(lo[0] + 1), static_cast<uint8_t>(hi[0] - 1), next);
      digits(next, static_cast<int32_t>(n - 1), static_cast<int32_t>(n - 1), to);
    }
    next = b_.add_state();
    b_.add_bytes(from, static_cast<uint8_t>(hi[0]), static_cast<uint8_t>(hi[0]), next);
    uint_range_same_length(next, zeros, rest_hi, to);
  }

  // Non-negative integers lo..hi in decimal, no leading zeros.
  void uint_range(StateId from, int64_t lo, int64_t hi, StateId to) {
    const std::string lo_text = std::to_string(lo);
    const std::string hi_text = std::to_string(hi);
    for (size_t n = lo_text.size(); n <= hi_text.size(); ++n) {
      std::string sub_lo(n, '0');
      sub_lo[0] = '1';
      if (n == lo_text.size()) sub_lo = lo_text;
      const std::string sub_hi = n == hi_text.size() ? hi_text : std::string(n, '9');
      uint_range_same_length(from, sub_lo, sub_hi, to);
    }
  }

  void int_range(StateId from, int64_t lo, int64_t hi, StateId to) {
    if (lo < 0) {
      const StateId minus = b_.add_state();
      b_.add_bytes(from, '-', '-', minus);
      uint_range(minus, -std::min<int64_t>(hi, -1), -lo, to);
    }
    if (hi >= 0) uint_range(from, std::max<int64_t>(lo, 0), hi, to);
  }

  // --- schemas ---------------------------------------------------------------------------

  Result<StateId> rule(const json& schema, const std::string& path) {
    if (auto it = memo_.find(&schema); it != memo_.end()) return it->second;
    LS_RETURN_IF_ERROR(check_size(path));
    if (++depth_ > 256) return invalid(path, "schema nested too deeply");
    const StateId start = b_.add_state();
    memo_[&schema] = start;
    Status status = build(schema, path, start);
    --depth_;
    if (!status.is_ok()) return status;
    return start;
  }

  // An epsilon jump into the rule of `schema`: its accepting states end the current rule.
  Status jump(StateId from, const json& schema, const std::string& path) {
    LS_ASSIGN_OR_RETURN(StateId target, rule(schema, path));
    b_.add_epsilon(from, target);
    return Status::ok();
  }

  Status build(const json& schema, const std::string& path, StateId start) {
    if (schema.is_boolean()) {
      if (!schema.get<bool>()) return unsupported(path, "the schema 'false' (nothing is valid)");
      b_.add_epsilon(start, any_value());
      return Status::ok();
    }
    if (!schema.is_object()) return invalid(path, "a schema must be an object or a boolean");
    for (const auto& [key, value] : schema.items()) {
      if (kAnnotations.contains(key) || kSupported.contains(key) || key.starts_with("x-")) continue;
      return unsupported(path, fmt::format("unsupported schema keyword '{}'", key));
    }
    if (const auto it = schema.find("$ref"); it != schema.end()) {
      for (const auto& [key, value] : schema.items()) {
        if (key != "$ref" && !kAnnotations.contains(key) && !key.starts_with("x-")) {
          return unsupported(path, fmt::format("'$ref' together with '{}'", key));
        }
      }
      LS_ASSIGN_OR_RETURN(const json* target, resolve(*it, path));
      return jump(start, *target, it->get<std::string>().substr(1));
    }
    if (const auto it = schema.find("const"); it != schema.end()) {
      b_.add_epsilon(start, literal_rule(it->dump()));
      return Status::ok();
    }
    if (const auto it = schema.find("enum"); it != schema.end()) {
      if (!it->is_array() || it->empty()) return invalid(path, "'enum' must be a non-empty array");
      for (const json& value : *it) b_.add_epsilon(start, literal_rule(value.dump()));
      return Status::ok();
    }
    for (const char* key : {"anyOf", "oneOf", "allOf"}) {
      const auto it = schema.find(key);
      if (it == schema.end()) continue;
      for (const auto& [other, value] : schema.items()) {
        if (other != key && kSupported.contains(other)) {
          return unsupported(path, fmt::format("'{}' together with '{}'", key, other));
        }
      }
      if (!it->is_array() || it->empty()) {
        return invalid(path, fmt::format("'{}' must be a non-empty array", key));
      }
      if (std::string_view(key) == "allOf" && it->size() != 1) {
        return unsupported(path, "'allOf' with more than one schema");
      }
      for (size_t i = 0; i < it->size(); ++i) {
        LS_RETURN_IF_ERROR(jump(start, (*it)[i], fmt::format("{}/{}/{}", path, key, i)));
      }
      return Status::ok();
    }
    const auto type = schema.find("type");
    if (type == schema.end()) {
      // Infer the type from the keywords, as OpenAI-style schemas often leave it out.
      if (schema.contains("properties") || schema.contains("additionalProperties") ||
          schema.contains("required")) {
        return typed(schema, "object", path, start);
      }
      if (schema.contains("items") || schema.contains("minItems") || schema.contains("maxItems")) {
        return typed(schema, "array", path, start);
      }
      if (schema.contains("pattern") || schema.contains("minLength") ||
          schema.contains("maxLength")) {
        return typed(schema, "string", path, start);
      }
      if (schema.contains("minimum") || schema.contains("maximum") ||
          schema.contains("exclusiveMinimum") || schema.contains("exclusiveMaximum")) {
        return typed(schema, "number", path, start);
      }
      b_.add_epsilon(start, any_value());
      return Status::ok();
    }
    if (type->is_string()) return typed(schema, type->get<std::string>(), path, start);
    if (!type->is_array() || type->empty()) {
      return invalid(path, "'type' must be a string or a non-empty array of strings");
    }
    for (const json& each : *type) {
      if (!each.is_string()) return invalid(path, "'type' must hold strings");
      const StateId branch = b_.add_state();
      b_.add_epsilon(start, branch);
      LS_RETURN_IF_ERROR(typed(schema, each.get<std::string>(), path, branch));
    }
    return Status::ok();
  }

  Result<const json*> resolve(const json& ref, const std::string& path) {
    if (!ref.is_string()) return invalid(path, "'$ref' must be a string");
    const std::string& text = ref.get_ref<const std::string&>();
    if (text.empty() || text[0] != '#') {
      return unsupported(path, fmt::format("'$ref' \"{}\": only references within the "
                                           "schema (\"#...\") are supported",
                                           text));
    }
    try {
      const json::json_pointer pointer(text.substr(1));
      return &root_.at(pointer);
    } catch (const json::exception&) {
      return invalid(path, fmt::format("'$ref' \"{}\" points at nothing", text));
    }
  }

  Result<int64_t> count(const json& schema, const char* key, int64_t fallback,
                        const std::string& path) {
    const auto it = schema.find(key);
    if (it == schema.end()) return fallback;
    if (!it->is_number_integer() || it->get<int64_t>() < 0) {
      return invalid(path, fmt::format("'{}' must be a non-negative integer", key));
    }
    const auto value = it->get<int64_t>();
    if (value > options_.max_count) {
      return unsupported(
          path, fmt::format("'{}' = {} (at most {} is supported)", key, value, options_.max_count));
    }
    return value;
  }

  Status typed(const json& schema, const std::string& type, const std::string& path,
               StateId start) {
    if (type == "string") return string_schema(schema, path, start);
    if (type == "integer" || type == "number") return number_schema(schema, type, path, start);
    if (type == "boolean") {
      b_.add_epsilon(start, literal_rule("true"));
      b_.add_epsilon(start, literal_rule("false"));
      return Status::ok();
    }
    if (type == "null") {
      b_.add_epsilon(start, literal_rule("null"));
      return Status::ok();
    }
    if (type == "object") return object_schema(schema, path, start);
    if (type == "array") return array_schema(schema, path, start);
    return invalid(path, fmt::format("unknown type '{}'", type));
  }

  Status string_schema(const json& schema, const std::string& path, StateId start) {
    LS_ASSIGN_OR_RETURN(int64_t min_length, count(schema, "minLength", 0, path));
    LS_ASSIGN_OR_RETURN(int64_t max_length, count(schema, "maxLength", -1, path));
    if (max_length >= 0 && max_length < min_length) {
      return invalid(path, "'maxLength' is below 'minLength'");
    }
    std::string pattern;
    if (const auto it = schema.find("pattern"); it != schema.end()) {
      if (!it->is_string()) return invalid(path, "'pattern' must be a string");
      pattern = it->get<std::string>();
    } else if (const auto format = schema.find("format");
               format != schema.end() && format->is_string()) {
      if (const char* p = format_pattern(format->get_ref<const std::string&>())) pattern = p;
    }
    if (pattern.empty() && !schema.contains("pattern")) {
      string_body(start, min_length, max_length);
      return Status::ok();
    }
    if (min_length > 0 || max_length >= 0) {
      return unsupported(path, "'minLength'/'maxLength' together with 'pattern' or 'format'");
    }
    const StateId open = b_.add_state();
    b_.add_bytes(start, '"', '"', open);
    const StateId close = b_.add_state();
    Status status = add_pattern(b_, pattern, open, close, options_.limits.max_states);
    if (!status.is_ok()) return Status(status.code(), status.message() + " at " + where(path));
    const StateId end = b_.add_state();
    b_.add_bytes(close, '"', '"', end);
    b_.set_accept(end);
    return Status::ok();
  }

  Status number_schema(const json& schema, const std::string& type, const std::string& path,
                       StateId start) {
    const double cap = std::pow(10.0, options_.max_integer_digits) - 1;
    double lo = -cap;
    double hi = cap;
    bool bounded = false;
    auto bound = [&](const char* key, bool lower, bool exclusive) -> Status {
      const auto it = schema.find(key);
      if (it == schema.end()) return Status::ok();
      if (it->is_boolean()) return Status::ok();  // draft 4 form, read below
      if (!it->is_number() || !std::isfinite(it->get<double>())) {
        return invalid(path, fmt::format("'{}' must be a number", key));
      }
      double v = it->get<double>();
      bool excl = exclusive;
      if (!exclusive) {
        // Draft 4: "exclusiveMinimum": true makes "minimum" exclusive.
        const auto flag = schema.find(lower ? "exclusiveMinimum" : "exclusiveMaximum");
        excl = flag != schema.end() && flag->is_boolean() && flag->get<bool>();
      }
      bounded = true;
      if (lower) {
        const double first = excl ? std::floor(v) + 1 : std::ceil(v);
        lo = std::max(lo, first);
      } else {
        const double last = excl ? std::ceil(v) - 1 : std::floor(v);
        hi = std::min(hi, last);
      }
      return Status::ok();
    };
    LS_RETURN_IF_ERROR(bound("minimum", true, false));
    LS_RETURN_IF_ERROR(bound("exclusiveMinimum", true, true));
    LS_RETURN_IF_ERROR(bound("maximum", false, false));
    LS_RETURN_IF_ERROR(bound("exclusiveMaximum", false, true));
    if (!bounded) {
      if (type == "number") {
        b_.add_epsilon(start, free_number());
      } else {
        const StateId end = b_.add_state();
        b_.set_accept(end);
        free_integer_body(start, end);
      }
      return Status::ok();
    }
    if (lo > hi) {
      return unsupported(path, fmt::format("a {} range with no integer in it "
                                           "(bounded numbers are generated as integers)",
                                           type));
    }
    const StateId end = b_.add_state();
    b_.set_accept(end);
    int_range(start, static_cast<int64_t>(lo), static_cast<int64_t>(hi), end);
    return Status::ok();
  }

  // {"key": value, ...} with any string keys and values of `value_rule`.
  void map_body(StateId start, StateId value_rule) {
    const StateId end = b_.add_state();
    b_.set_accept(end);
    const StateId open = b_.add_state();
    b_.add_bytes(start, '{', '{', open);
    const StateId first = ws(open);
    b_.add_bytes(first, '}', '}', end);
    const StateId key = b_.add_state();
    b_.add_epsilon(first, key);
    StateId at = ws(call(key, free_string()));
    const StateId colon = b_.add_state();
    b_.add_bytes(at, ':', ':', colon);
    const StateId after_value = ws(call(ws(colon), value_rule));
    b_.add_bytes(after_value, '}', '}', end);
    const StateId comma = b_.add_state();
    b_.add_bytes(after_value, ',', ',', comma);
    b_.add_epsilon(ws(comma), key);
  }

  StateId any_object() {
    if (any_object_ != kNoState) return any_object_;
    any_object_ = b_.add_state();
    map_body(any_object_, any_value());
    return any_object_;
  }

  // [item, ...] with min..max items (max < 0: unbounded).
  void array_body(StateId start, StateId item_rule, int64_t min_items, int64_t max_items) {
    const StateId end = b_.add_state();
    b_.set_accept(end);
    const StateId open = b_.add_state();
    b_.add_bytes(start, '[', '[', open);
    const StateId first = ws(open);
    if (min_items == 0) b_.add_bytes(first, ']', ']', end);
    if (max_items == 0) return;
    // after[k]: k items read, then whitespace.
    const int64_t counted = max_items >= 0 ? max_items : std::max<int64_t>(min_items, 1);
    StateId after = ws(call(first, item_rule));
    for (int64_t k = 1;; ++k) {
      if (k >= min_items) b_.add_bytes(after, ']', ']', end);
      const StateId comma = b_.add_state();
      if (k == counted) {
        if (max_items < 0) {
          b_.add_bytes(after, ',', ',', comma);
          const StateId item_done = call(ws(comma), item_rule);
          b_.add_epsilon(ws(item_done), after);
        }
        break;
      }
      b_.add_bytes(after, ',', ',', comma);
      after = ws(call(ws(comma), item_rule));
    }
  }

  StateId any_array() {
    if (any_array_ != kNoState) return any_array_;
    any_array_ = b_.add_state();
    array_body(any_array_, any_value(), 0, -1);
    return any_array_;
  }

  StateId any_value() {
    if (any_value_ != kNoState) return any_value_;
    any_value_ = b_.add_state();
    b_.add_epsilon(any_value_, any_object());
    b_.add_epsilon(any_value_, any_array());
    b_.add_epsilon(any_value_, free_string());
    b_.add_epsilon(any_value_, free_number());
    for (const char* word : {"true", "false", "null"}) {
      b_.add_epsilon(any_value_, literal_rule(word));
    }
    return any_value_;
  }

  Status object_schema(const json& schema, const std::string& path, StateId start) {
    const auto properties = schema.find("properties");
    std::vector<std::string> required;
    if (const auto it = schema.find("required"); it != schema.end()) {
      if (!it->is_array()) return invalid(path, "'required' must be an array of strings");
      for (const json& name : *it) {
        if (!name.is_string()) return invalid(path, "'required' must be an array of strings");
        if (properties == schema.end() || !properties->is_object() ||
            !properties->contains(name.get<std::string>())) {
          return unsupported(path, fmt::format("required property '{}' not in 'properties'",
                                               name.get<std::string>()));
        }
        required.push_back(name.get<std::string>());
      }
    }
    const auto additional = schema.find("additionalProperties");
    if (properties == schema.end()) {
      StateId value_rule = kNoState;
      if (additional == schema.end() || (additional->is_boolean() && additional->get<bool>())) {
        value_rule = any_value();
      } else if (additional->is_boolean()) {
        // No property may appear: only {}.
        const StateId open = b_.add_state();
        b_.add_bytes(start, '{', '{', open);
        const StateId end = b_.add_state();
        b_.add_bytes(ws(open), '}', '}', end);
        b_.set_accept(end);
        return Status::ok();
      } else {
        LS_ASSIGN_OR_RETURN(value_rule, rule(*additional, path + "/additionalProperties"));
      }
      map_body(start, value_rule);
      return Status::ok();
    }
    if (!properties->is_object()) return invalid(path, "'properties' must be an object");
    if (additional != schema.end() && !additional->is_boolean() && !additional->is_object()) {
      return invalid(path, "'additionalProperties' must be a boolean or a schema");
    }

    // none[i]: no property written yet, deciding property i; some[i]: at least one written
    // (and the whitespace after it read), deciding property i.
    const StateId end = b_.add_state();
    b_.set_accept(end);
    const StateId open = b_.add_state();
    b_.add_bytes(start, '{', '{', open);
    StateId none = ws(open);
    StateId some = kNoState;
    for (const auto& [name, property_schema] : properties->items()) {
      const bool is_required = std::find(required.begin(), required.end(), name) != required.end();
      const std::string property_path = path + "/properties/" + escape_pointer(name);
      LS_ASSIGN_OR_RETURN(StateId value_rule, rule(property_schema, property_path));
      // The property itself, from `key`: "name" : value, then whitespace.
      const StateId key = b_.add_state();
      const StateId after_key = ws(b_.add_literal(key, json(name).dump()));
      const StateId colon = b_.add_state();
      b_.add_bytes(after_key, ':', ':', colon);
      const StateId written = ws(call(ws(colon), value_rule));
      if (none != kNoState) b_.add_epsilon(none, key);
      if (some != kNoState) {
        const StateId comma = b_.add_state();
        b_.add_bytes(some, ',', ',', comma);
        b_.add_epsilon(ws(comma), key);
        if (!is_required) b_.add_epsilon(some, written);
      }
      if (is_required) none = kNoState;
      // Optional: skipping it keeps `none`, and `some` continues from `written` by epsilon.
      some = written;
      if (b_.over_limit(options_.limits)) return check_size(property_path);
    }
    if (none != kNoState) b_.add_bytes(none, '}', '}', end);
    if (some != kNoState) b_.add_bytes(some, '}', '}', end);
    return Status::ok();
  }

  Status array_schema(const json& schema, const std::string& path, StateId start) {
    LS_ASSIGN_OR_RETURN(int64_t min_items, count(schema, "minItems", 0, path));
    LS_ASSIGN_OR_RETURN(int64_t max_items, count(schema, "maxItems", -1, path));
    if (max_items >= 0 && max_items < min_items) {
      return invalid(path, "'maxItems' is below 'minItems'");
    }
    StateId item_rule = kNoState;
    const auto items = schema.find("items");
    if (items == schema.end()) {
      item_rule = any_value();
    } else if (items->is_array()) {
      return unsupported(path, "'items' as an array (tuples, 'prefixItems')");
    } else {
      LS_ASSIGN_OR_RETURN(item_rule, rule(*items, path + "/items"));
    }
    array_body(start, item_rule, min_items, max_items);
    return Status::ok();
  }

  const json& root_;
  const CompileOptions& options_;
  GrammarBuilder b_;
  std::unordered_map<const json*, StateId> memo_;
  int depth_ = 0;
  StateId ws_ = kNoState;
  StateId free_string_ = kNoState;
  StateId free_number_ = kNoState;
  StateId any_object_ = kNoState;
  StateId any_array_ = kNoState;
  StateId any_value_ = kNoState;
};

}  // namespace

Result<Grammar> compile_json_schema(const nlohmann::ordered_json& schema,
                                    const CompileOptions& options) {
  Compiler compiler(schema, options);
  return compiler.compile_schema();
}

Result<Grammar> compile_json_object(const CompileOptions& options) {
  const json empty = json::object();
  Compiler compiler(empty, options);
  return compiler.compile_any_object();
}

}  // namespace llamaserve::grammar
