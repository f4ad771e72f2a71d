#include "jinja/template.h"

#include <ctime>

#include "jinja/ast.h"
#include "jinja/builtins.h"
#include "jinja/parser.h"

namespace llamaserve::jinja {
namespace {

void check_names(const Expr* expr);

void check_names(const std::vector<ExprPtr>& exprs) {
  for (const ExprPtr& e : exprs) check_names(e.get());
}

void check_names(const Expr* expr) {
  if (expr == nullptr) return;
  if (expr->kind == ExprKind::kFilter && !is_known_filter(expr->name)) {
    fail(ErrorKind::kSyntax, expr->line, "No filter named '{}'.", expr->name);
  }
  if (expr->kind == ExprKind::kTest && !is_known_test(expr->name)) {
    fail(ErrorKind::kSyntax, expr->line, "No test named '{}'.", expr->name);
  }
  check_names(expr->operand.get());
  check_names(expr->second.get());
  check_names(expr->third.get());
  check_names(expr->fourth.get());
  check_names(expr->items);
  check_names(expr->keys);
  for (const auto& [name, value] : expr->keyword) check_names(value.get());
}

void check_names(const Body& body) {
  for (const StmtPtr& stmt : body) {
    check_names(stmt->expr.get());
    check_names(stmt->condition.get());
    check_names(stmt->conditions);
    check_names(stmt->filters);
    for (const Body& b : stmt->bodies) check_names(b);
    check_names(stmt->body);
    check_names(stmt->else_body);
    for (const Param& p : stmt->params) check_names(p.default_value.get());
  }
}

Status to_status(const JinjaError& e, ErrorDetail* detail) {
  if (detail != nullptr) *detail = {e.kind(), e.line(), e.message()};
  const char* what = e.kind() == ErrorKind::kSyntax ? "syntax error: " : "";
  if (e.line() > 0) {
    return make_error(StatusCode::kInvalidArgument, "{}{} (line {})", what, e.message(), e.line());
  }
  return make_error(StatusCode::kInvalidArgument, "{}{}", what, e.message());
}

Value value_from_json_at(const nlohmann::ordered_json& json, bool client, int depth) {
  if (depth > kMaxValueDepth) runtime_error("input nested more than {} deep", kMaxValueDepth);
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::integer(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = json.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value::integer(static_cast<int64_t>(u));
      return Value::number(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::number(json.get<double>());
    case nlohmann::ordered_json::value_t::string: {
      std::string text = json.get<std::string>();
      return client ? Value::tainted_string(std::move(text)) : Value::string(std::move(text));
    }
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(value_from_json_at(item, client, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      std::vector<std::pair<Value, Value>> items;
      items.reserve(json.size());
      for (const auto& [key, item] : json.items()) {
        items.emplace_back(client ? Value::tainted_string(key) : Value::string(key),
                           value_from_json_at(item, client, depth + 1));
      }
      return Value::dict(std::move(items));
    }
    default: return Value::none();
  }
}

void add_hf_globals(Scope& scope) {
  scope.vars["raise_exception"] =
      Value::callable("raise_exception", [](Evaluator&, Arguments& args) -> Value {
        std::string message;
        if (!args.positional.empty()) message = to_str(args.positional[0]).text();
        throw JinjaError(ErrorKind::kRaised, message);
      });
  scope.vars["strftime_now"] = Value::callable("strftime_now", [](Evaluator&, Arguments& args) {
    if (args.positional.empty() || !args.positional[0].is_string()) {
      runtime_error("strftime_now(format) needs a format string");
    }
    const std::string& format = args.positional[0].text();
    if (format.size() > 256) runtime_error("strftime_now: format too long");
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buffer[4096];
    const size_t n = std::strftime(buffer, sizeof(buffer), format.c_str(), &local);
    return Value::string(std::string(buffer, n));
  });
}

}  // namespace

Value value_from_json(const nlohmann::ordered_json& json, bool client) {
  return value_from_json_at(json, client, 0);
}

Result<Template> Template::parse(std::string_view text, const LexerOptions& options,
                                 ErrorDetail* error) {
  try {
    auto program = std::make_shared<Program>(jinja::parse(tokenize(text, options)));
    check_names(program->body);
    return Template(std::move(program));
  } catch (const JinjaError& e) {
    return to_status(e, error);
  }
}

Result<RenderOutput> Template::render(const nlohmann::ordered_json& template_variables,
                                      const nlohmann::ordered_json& client_variables,
                                      const RenderLimits& limits, ErrorDetail* error) const {
  try {
    auto builtins = std::make_shared<Scope>();
    add_global_functions(*builtins);
    add_hf_globals(*builtins);
    auto globals = std::make_shared<Scope>();
    globals->parent = builtins;
    for (const auto* vars : {&template_variables, &client_variables}) {
      if (vars->is_null()) continue;
      if (!vars->is_object()) runtime_error("template variables must be a JSON object");
      for (const auto& [name, value] : vars->items()) {
        globals->vars[name] = value_from_json(value, vars == &client_variables);
      }
    }
    Evaluator evaluator(limits, globals);
    StringData out = evaluator.render(*program_);
    return RenderOutput{std::move(out.text), std::move(out.taint)};
  } catch (const JinjaError& e) {
    return to_status(e, error);
  } catch (const std::bad_alloc&) {
    JinjaError e(ErrorKind::kLimit, "out of memory while rendering the template");
    return to_status(e, error);
  }
}

}  // namespace llamaserve::jinja
