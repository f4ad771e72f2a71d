#include "jinja/evaluator.h"

#include <cmath>
#include <limits>

#include "jinja/builtins.h"
#include "jinja/errors.h"
#include "jinja/text_ops.h"

namespace llamaserve::jinja {
namespace {

// Deeper than this the render stops: bounds the native stack a template can use, whatever
// mix of nested expressions and macro calls it makes.
constexpr int kMaxEvalDepth = 2000;

std::optional<int64_t> as_index(const Value& v) {
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool() ? 1 : 0;
  return std::nullopt;
}

int64_t as_integer(const Value& v) { return v.is_bool() ? (v.as_bool() ? 1 : 0) : v.as_int(); }

[[noreturn]] void fail_undefined(const Value& v) { runtime_error("{}", v.undefined_hint()); }

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  runtime_error("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(),
                b.type_name());
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  const bool ints = (a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool());
  if (ints) {
    const int64_t x = as_integer(a);
    const int64_t y = as_integer(b);
    int64_t r = 0;
    if (op == "+") {
      if (!__builtin_add_overflow(x, y, &r)) return Value::integer(r);
      runtime_error("integer overflow");
    }
    if (op == "-") {
      if (!__builtin_sub_overflow(x, y, &r)) return Value::integer(r);
      runtime_error("integer overflow");
    }
    if (op == "*") {
      if (!__builtin_mul_overflow(x, y, &r)) return Value::integer(r);
      runtime_error("integer overflow");
    }
    if (op == "/") {
      if (y == 0) runtime_error("division by zero");
      return Value::number(static_cast<double>(x) / static_cast<double>(y));
    }
    if (op == "//" || op == "%") {
      if (y == 0) runtime_error("integer division or modulo by zero");
      if (x == std::numeric_limits<int64_t>::min() && y == -1) runtime_error("integer overflow");
      int64_t q = x / y;
      int64_t m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      return Value::integer(op == "//" ? q : m);
    }
    if (op == "**") {
      if (y < 0) return Value::number(std::pow(static_cast<double>(x), static_cast<double>(y)));
      int64_t result = 1;
      int64_t base = x;
      int64_t e = y;
      while (e > 0) {
        if ((e & 1) && __builtin_mul_overflow(result, base, &result)) {
          runtime_error("integer overflow");
        }
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base)) runtime_error("integer overflow");
      }
      return Value::integer(result);
    }
  }
  const double x = a.to_double();
  const double y = b.to_double();
  if (op == "+") return Value::number(x + y);
  if (op == "-") return Value::number(x - y);
  if (op == "*") return Value::number(x * y);
  if (op == "/") {
    if (y == 0) runtime_error("float division by zero");
    return Value::number(x / y);
  }
  if (op == "//") {
    if (y == 0) runtime_error("float floor division by zero");
    return Value::number(std::floor(x / y));
  }
  if (op == "%") {
    if (y == 0) runtime_error("float modulo");
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Value::number(m);
  }
  if (op == "**") {
    if (x == 0 && y < 0) runtime_error("0.0 cannot be raised to a negative power");
    return Value::number(std::pow(x, y));
  }
  runtime_error("unknown operator '{}'", op);
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string()) {
      runtime_error("'in <string>' requires string as left operand, not {}", item.type_name());
    }
    return container.text().find(item.text()) != std::string::npos;
  }
  if (container.is_list()) {
    for (const Value& v : container.list().items) {
      if (values_equal(v, item)) return true;
    }
    return false;
  }
  if (container.is_dict()) return container.dict().find(item) != nullptr;
  if (container.is_undefined()) return false;
  runtime_error("argument of type '{}' is not iterable", container.type_name());
}

}  // namespace

Value* Scope::find(const std::string& name) {
  for (Scope* s = this; s != nullptr; s = s->parent.get()) {
    const auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

Value binary_operator(Evaluator& ev, const std::string& op, const Value& left, const Value& right) {
  if (op == "==") return Value::boolean(values_equal(left, right));
  if (op == "!=") return Value::boolean(!values_equal(left, right));
  if (op == "<") return Value::boolean(value_less(left, right));
  if (op == ">") return Value::boolean(value_less(right, left));
  if (op == "<=") return Value::boolean(values_equal(left, right) || value_less(left, right));
  if (op == ">=") return Value::boolean(values_equal(left, right) || value_less(right, left));
  if (op == "in") return Value::boolean(contains(right, left));
  if (op == "not in") return Value::boolean(!contains(right, left));
  if (op == "~") {
    TextBuilder out;
    append_str(out, left);
    append_str(out, right);
    ev.check_size(out.size());
    return Value::string(out.take());
  }
  if (left.is_undefined()) fail_undefined(left);
  if (right.is_undefined()) fail_undefined(right);
  if (op == "+") {
    if (left.is_string() && right.is_string()) {
      ev.check_size(left.text().size() + right.text().size());
      TextBuilder out;
      out.append(left.str());
      out.append(right.str());
      return Value::string(out.take());
    }
    if (left.is_list() && right.is_list()) {
      if (left.list().is_tuple != right.list().is_tuple) unsupported(op, left, right);
      std::vector<Value> items = left.list().items;
      ev.step(items.size() + right.list().items.size());
      items.insert(items.end(), right.list().items.begin(), right.list().items.end());
      return Value::list(std::move(items), left.list().is_tuple);
    }
  }
  if (op == "*") {
    const Value* seq = left.is_string() || left.is_list() ? &left : &right;
    const Value* times = seq == &left ? &right : &left;
    if ((seq->is_string() || seq->is_list()) && (times->is_int() || times->is_bool())) {
      const int64_t n = std::max<int64_t>(0, as_integer(*times));
      if (seq->is_string()) {
        const size_t size = seq->text().size();
        if (size > 0 && static_cast<uint64_t>(n) > (size_t{1} << 40) / size)
          ev.check_size(size_t{1} << 40);
        ev.check_size(size * static_cast<size_t>(n));
        TextBuilder out;
        for (int64_t i = 0; i < n; ++i) out.append(seq->str());
        return Value::string(out.take());
      }
      const size_t count =
          seq->list().items.size() * static_cast<size_t>(std::min<int64_t>(n, 1 << 30));
      ev.step(count);
      std::vector<Value> items;
      for (int64_t i = 0; i < n; ++i) {
        items.insert(items.end(), seq->list().items.begin(), seq->list().items.end());
      }
      return Value::list(std::move(items), seq->list().is_tuple);
    }
  }
  if (op == "%" && left.is_string()) return format_percent(ev, left, right);
  if (left.is_number() && right.is_number()) return arithmetic(op, left, right);
  unsupported(op, left, right);
}

Value get_attribute(const Value& object, const std::string& name) {
  if (object.is_undefined()) fail_undefined(object);
  if (object.is_dict()) {
    if (Value method = bound_method(object, name); !method.is_undefined()) return method;
    if (const Value* v = object.dict().find(Value::string(name))) return *v;
    return Value::undefined(fmt::format("'dict object' has no attribute '{}'", name));
  }
  if (object.is_namespace()) {
    if (Value* v = object.ns().find(name)) return *v;
    return Value::undefined(fmt::format("'Namespace object' has no attribute '{}'", name));
  }
  if (Value method = bound_method(object, name); !method.is_undefined()) return method;
  if (object.is_none()) return Value::undefined(fmt::format("'None' has no attribute '{}'", name));
  return Value::undefined(
      fmt::format("'{} object' has no attribute '{}'", object.type_name(), name));
}

Value get_item(const Value& object, const Value& key) {
  if (object.is_undefined()) fail_undefined(object);
  if (object.is_dict()) {
    if (const Value* v = object.dict().find(key)) return *v;
  } else if (object.is_list() || object.is_string()) {
    if (const std::optional<int64_t> index = as_index(key)) {
      if (object.is_list()) {
        const auto& items = object.list().items;
        const int64_t n = static_cast<int64_t>(items.size());
        const int64_t i = *index < 0 ? *index + n : *index;
        if (i >= 0 && i < n) return items[i];
        return Value::undefined(
            fmt::format("{} object has no element {}", object.type_name(), *index));
      }
      const std::vector<size_t> offsets = code_point_offsets(object.text());
      const int64_t n = static_cast<int64_t>(offsets.size()) - 1;
      const int64_t i = *index < 0 ? *index + n : *index;
      if (i >= 0 && i < n) return Value::string(slice_text(object.str(), {i}));
      return Value::undefined(fmt::format("str object has no element {}", *index));
    }
  } else if (object.is_namespace() && key.is_string()) {
    if (Value* v = object.ns().find(key.text())) return *v;
  }
  if (key.is_string()) {
    if (Value method = bound_method(object, key.text()); !method.is_undefined()) return method;
    return Value::undefined(
        fmt::format("'{} object' has no attribute '{}'", object.type_name(), key.text()));
  }
  TextBuilder repr;
  append_repr(repr, key);
  return Value::undefined(
      fmt::format("'{} object' has no attribute {}", object.type_name(), repr.text()));
}

struct Evaluator::DepthGuard {
  explicit DepthGuard(Evaluator& e) : ev(e) {
    if (++ev.eval_depth_ > kMaxEvalDepth) {
      throw JinjaError(ErrorKind::kLimit,
                       fmt::format("template nested more than {} levels deep", kMaxEvalDepth));
    }
  }
  ~DepthGuard() { --ev.eval_depth_; }
  Evaluator& ev;
};

void Evaluator::step(uint64_t count) {
  steps_ += count;
  if (steps_ > limits_.max_steps) {
    throw JinjaError(ErrorKind::kLimit,
                     fmt::format("the template took more than {} evaluation steps (a loop that "
                                 "does not end?)",
                                 limits_.max_steps));
  }
}

void Evaluator::check_size(size_t bytes) const {
  if (bytes > limits_.max_output_bytes) {
    throw JinjaError(ErrorKind::kLimit, fmt::format("the template's output exceeds {} bytes",
                                                    limits_.max_output_bytes));
  }
}

StringData Evaluator::render(const Program& program) {
  TextBuilder root;
  out_ = &root;
  auto scope = std::make_shared<Scope>();
  scope->parent = globals_;
  exec(program.body, scope);
  out_ = nullptr;
  return root.take();
}

Evaluator::Flow Evaluator::exec(const Body& body, const ScopePtr& scope) {
  for (const StmtPtr& stmt : body) {
    const Flow flow = exec(*stmt, scope);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

void Evaluator::emit(const Value& value) {
  append_str(*out_, value);
  check_size(out_->size());
}

Evaluator::Flow Evaluator::exec(const Stmt& stmt, const ScopePtr& scope) {
  DepthGuard guard(*this);
  step();
  try {
    switch (stmt.kind) {
      case StmtKind::kText:
        out_->append(stmt.text);
        check_size(out_->size());
        return Flow::kNormal;
      case StmtKind::kPrint: emit(eval(*stmt.expr, scope)); return Flow::kNormal;
      case StmtKind::kIf:
        for (size_t i = 0; i < stmt.conditions.size(); ++i) {
          if (eval(*stmt.conditions[i], scope).truthy()) return exec(stmt.bodies[i], scope);
        }
        return exec(stmt.else_body, scope);
      case StmtKind::kFor: {
        Flow flow = Flow::kNormal;
        exec_for(stmt, scope, flow);
        return flow;
      }
      case StmtKind::kSet:
      case StmtKind::kSetBlock: exec_set(stmt, scope); return Flow::kNormal;
      case StmtKind::kMacro: exec_macro(stmt, scope); return Flow::kNormal;
      case StmtKind::kCallBlock: exec_call_block(stmt, scope); return Flow::kNormal;
      case StmtKind::kFilterBlock:
        emit(apply_filter_chain(stmt.filters, capture(stmt.body, scope), scope));
        return Flow::kNormal;
      case StmtKind::kBreak: return Flow::kBreak;
      case StmtKind::kContinue: return Flow::kContinue;
      case StmtKind::kScope: return exec(stmt.body, scope);
    }
  } catch (JinjaError& error) {
    error.set_line_if_unknown(stmt.line);
    throw;
  }
  return Flow::kNormal;
}

namespace {

std::vector<Value> iterate(const Value& value) {
  if (value.is_list()) return value.list().items;
  if (value.is_dict()) {
    std::vector<Value> keys;
    for (const auto& [k, v] : value.dict().items) keys.push_back(k);
    return keys;
  }
  if (value.is_string()) {
    std::vector<Value> chars;
    const std::vector<size_t> offsets = code_point_offsets(value.text());
    for (size_t i = 0; i + 1 < offsets.size(); ++i) {
      TextBuilder out;
      out.append_slice(value.str(), offsets[i], offsets[i + 1]);
      chars.push_back(Value::string(out.take()));
    }
    return chars;
  }
  if (value.is_undefined()) return {};
  runtime_error("'{}' object is not iterable", value.type_name());
}

void bind_targets(Scope& scope, const std::vector<std::string>& targets, bool unpack,
                  const Value& value) {
  if (!unpack) {
    scope.vars[targets[0]] = value;
    return;
  }
  const std::vector<Value> items = iterate(value);
  if (items.size() != targets.size()) {
    runtime_error("cannot unpack {} values into {} names", items.size(), targets.size());
  }
  for (size_t i = 0; i < targets.size(); ++i) scope.vars[targets[i]] = items[i];
}

}  // namespace

std::vector<Value> iterable_items(const Value& value) { return iterate(value); }

void Evaluator::exec_for(const Stmt& stmt, const ScopePtr& scope, Flow& flow) {
  std::vector<Value> items = iterate(eval(*stmt.expr, scope));
  step(items.size());
  if (stmt.condition) {
    std::vector<Value> kept;
    for (const Value& item : items) {
      auto probe = std::make_shared<Scope>();
      probe->parent = scope;
      bind_targets(*probe, stmt.targets, stmt.unpack, item);
      if (eval(*stmt.condition, probe).truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    auto inner = std::make_shared<Scope>();
    inner->parent = scope;
    flow = exec(stmt.else_body, inner);
    return;
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    auto inner = std::make_shared<Scope>();
    inner->parent = scope;
    const Value cycle = Value::callable("cycle", [i](Evaluator&, Arguments& args) {
      if (args.positional.empty()) runtime_error("no items for cycling given");
      return args.positional[static_cast<size_t>(i) % args.positional.size()];
    });
    inner->vars["loop"] = Value::dict({
        {Value::string("index"), Value::integer(i + 1)},
        {Value::string("index0"), Value::integer(i)},
        {Value::string("revindex"), Value::integer(n - i)},
        {Value::string("revindex0"), Value::integer(n - i - 1)},
        {Value::string("first"), Value::boolean(i == 0)},
        {Value::string("last"), Value::boolean(i == n - 1)},
        {Value::string("length"), Value::integer(n)},
        {Value::string("depth"), Value::integer(1)},
        {Value::string("depth0"), Value::integer(0)},
        {Value::string("previtem"),
         i > 0 ? items[i - 1] : Value::undefined("there is no previous item")},
        {Value::string("nextitem"),
         i + 1 < n ? items[i + 1] : Value::undefined("there is no next item")},
        {Value::string("cycle"), cycle},
    });
    bind_targets(*inner, stmt.targets, stmt.unpack, items[i]);
    const Flow body_flow = exec(stmt.body, inner);
    if (body_flow == Flow::kBreak) break;
  }
  flow = Flow::kNormal;
}

namespace {

bool holds_namespace(const Value& value) {
  if (value.is_namespace()) return true;
  if (value.is_list()) {
    for (const Value& item : value.list().items) {
      if (holds_namespace(item)) return true;
    }
  }
  if (value.is_dict()) {
    for (const auto& [k, v] : value.dict().items) {
      if (holds_namespace(v)) return true;
    }
  }
  return false;
}

}  // namespace

void Evaluator::exec_set(const Stmt& stmt, const ScopePtr& scope) {
  Value value;
  if (stmt.kind == StmtKind::kSetBlock) {
    value = apply_filter_chain(stmt.filters, capture(stmt.body, scope), scope);
  } else {
    value = eval(*stmt.expr, scope);
  }
  if (!stmt.attribute.empty()) {
    Value* target = scope->find(stmt.targets[0]);
    if (target == nullptr || !target->is_namespace()) {
      runtime_error("cannot assign attribute on non-namespace object");
    }
    // A namespace inside a namespace could make a cycle, which shared ownership cannot free.
    if (holds_namespace(value)) runtime_error("a namespace cannot hold another namespace");
    if (Value* slot = target->ns().find(stmt.attribute)) {
      *slot = std::move(value);
    } else {
      target->ns().attrs.emplace_back(stmt.attribute, std::move(value));
    }
    return;
  }
  bind_targets(*scope, stmt.targets, stmt.unpack, value);
}

void Evaluator::exec_macro(const Stmt& stmt, const ScopePtr& scope) {
  const Stmt* macro = &stmt;
  std::weak_ptr<Scope> defined_in = scope;
  scope->vars[stmt.targets[0]] =
      Value::callable(stmt.targets[0], [macro, defined_in](Evaluator& ev, Arguments& args) {
        return ev.call_macro(*macro, defined_in, args);
      });
}

Value Evaluator::call_macro(const Stmt& macro, const std::weak_ptr<Scope>& defined_in,
                            Arguments& args) {
  ScopePtr parent = defined_in.lock();
  if (!parent) runtime_error("'{}' was called after its scope ended", macro.targets[0]);
  if (call_depth_ >= limits_.max_call_depth) {
    throw JinjaError(ErrorKind::kLimit,
                     fmt::format("macro calls nested more than {} deep", limits_.max_call_depth));
  }
  ++call_depth_;
  struct Leave {
    int& depth;
    ~Leave() { --depth; }
  } leave{call_depth_};
  auto scope = std::make_shared<Scope>();
  scope->parent = parent;
  std::vector<Value> varargs;
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (i < macro.params.size()) {
      scope->vars[macro.params[i].name] = args.positional[i];
    } else {
      varargs.push_back(args.positional[i]);
    }
  }
  std::vector<std::pair<Value, Value>> kwargs;
  for (auto& [name, value] : args.keyword) {
    bool is_param = false;
    for (const Param& p : macro.params) is_param = is_param || p.name == name;
    if (is_param || name == "caller") {
      scope->vars[name] = value;
    } else {
      kwargs.emplace_back(Value::string(name), value);
    }
  }
  for (const Param& p : macro.params) {
    if (scope->vars.contains(p.name)) continue;
    scope->vars[p.name] = p.default_value
                              ? eval(*p.default_value, scope)
                              : Value::undefined(fmt::format("'{}' is undefined", p.name));
  }
  scope->vars["varargs"] = Value::list(std::move(varargs));
  scope->vars["kwargs"] = Value::dict(std::move(kwargs));
  return capture(macro.body, scope);
}

void Evaluator::exec_call_block(const Stmt& stmt, const ScopePtr& scope) {
  const Stmt* block = &stmt;
  std::weak_ptr<Scope> weak = scope;
  Value caller = Value::callable("caller", [block, weak](Evaluator& ev, Arguments& args) {
    return ev.call_macro(*block, weak, args);
  });
  const Expr& call = *stmt.expr;
  Value callee = eval(*call.operand, scope);
  Arguments args = eval_arguments(call, scope);
  args.keyword.emplace_back("caller", caller);
  emit(this->call(callee, args));
}

Value Evaluator::capture(const Body& body, const ScopePtr& scope) {
  TextBuilder buffer;
  TextBuilder* saved = out_;
  out_ = &buffer;
  struct Restore {
    TextBuilder*& out;
    TextBuilder* saved;
    ~Restore() { out = saved; }
  } restore{out_, saved};
  exec(body, scope);
  return Value::string(buffer.take());
}

Value Evaluator::apply_filter_chain(const std::vector<ExprPtr>& filters, Value value,
                                    const ScopePtr& scope) {
  for (const ExprPtr& filter : filters) {
    Arguments args = eval_arguments(*filter, scope);
    value = apply_filter(filter->name, value, args);
  }
  return value;
}

Value Evaluator::call(const Value& callee, Arguments& args) {
  if (callee.is_callable()) return callee.callable().function(*this, args);
  if (callee.is_undefined()) fail_undefined(callee);
  runtime_error("'{}' object is not callable", callee.type_name());
}

Value Evaluator::apply_filter(const std::string& name, const Value& input, Arguments& args) {
  return call_filter(*this, name, input, args);
}

bool Evaluator::apply_test(const std::string& name, const Value& input, Arguments& args) {
  return call_test(*this, name, input, args);
}

Arguments Evaluator::eval_arguments(const Expr& expr, const ScopePtr& scope, Value* first) {
  Arguments args;
  args.line = expr.line;
  if (first != nullptr) args.positional.push_back(*first);
  for (const ExprPtr& item : expr.items) args.positional.push_back(eval(*item, scope));
  for (const auto& [name, value] : expr.keyword)
    args.keyword.emplace_back(name, eval(*value, scope));
  return args;
}

Value Evaluator::eval(const Expr& expr, const ScopePtr& scope) {
  DepthGuard guard(*this);
  step();
  try {
    switch (expr.kind) {
      case ExprKind::kLiteral: return expr.value;
      case ExprKind::kName: {
        if (Value* v = scope->find(expr.name)) return *v;
        return Value::undefined(fmt::format("'{}' is undefined", expr.name));
      }
      case ExprKind::kGetAttr: return get_attribute(eval(*expr.operand, scope), expr.name);
      case ExprKind::kGetItem: {
        const Value object = eval(*expr.operand, scope);
        return get_item(object, eval(*expr.second, scope));
      }
      case ExprKind::kSlice: {
        const Value object = eval(*expr.operand, scope);
        std::optional<int64_t> bounds[3];
        const Expr* parts[3] = {expr.second.get(), expr.third.get(), expr.fourth.get()};
        for (int i = 0; i < 3; ++i) {
          if (parts[i] == nullptr) continue;
          const Value v = eval(*parts[i], scope);
          if (v.is_none()) continue;
          const std::optional<int64_t> index = as_index(v);
          if (!index) runtime_error("slice indices must be integers or None");
          bounds[i] = index;
        }
        if (object.is_undefined()) fail_undefined(object);
        if (object.is_list()) {
          const auto& items = object.list().items;
          std::vector<Value> out;
          for (const int64_t i : slice_positions(static_cast<int64_t>(items.size()), bounds[0],
                                                 bounds[1], bounds[2])) {
            out.push_back(items[i]);
          }
          return Value::list(std::move(out), object.list().is_tuple);
        }
        if (object.is_string()) {
          const int64_t n = static_cast<int64_t>(code_point_count(object.text()));
          return Value::string(
              slice_text(object.str(), slice_positions(n, bounds[0], bounds[1], bounds[2])));
        }
        runtime_error("'{}' object is not subscriptable", object.type_name());
      }
      case ExprKind::kCall: {
        const Value callee = eval(*expr.operand, scope);
        Arguments args = eval_arguments(expr, scope);
        return call(callee, args);
      }
      case ExprKind::kFilter: {
        const Value input = eval(*expr.operand, scope);
        Arguments args = eval_arguments(expr, scope);
        return apply_filter(expr.name, input, args);
      }
      case ExprKind::kTest: {
        const Value input = eval(*expr.operand, scope);
        Arguments args = eval_arguments(expr, scope);
        return Value::boolean(apply_test(expr.name, input, args) != expr.negated);
      }
      case ExprKind::kUnary: {
        const Value v = eval(*expr.operand, scope);
        if (expr.name == "not") return Value::boolean(!v.truthy());
        if (v.is_undefined()) fail_undefined(v);
        if (!v.is_number()) {
          runtime_error("bad operand type for unary {}: '{}'", expr.name, v.type_name());
        }
        if (expr.name == "+") return v.is_bool() ? Value::integer(v.as_bool()) : v;
        if (v.is_float()) return Value::number(-v.as_float());
        const int64_t i = as_integer(v);
        if (i == std::numeric_limits<int64_t>::min()) runtime_error("integer overflow");
        return Value::integer(-i);
      }
      case ExprKind::kBinary: return eval_binary(expr, scope);
      case ExprKind::kConditional: {
        if (eval(*expr.operand, scope).truthy()) return eval(*expr.second, scope);
        if (expr.third) return eval(*expr.third, scope);
        return Value::undefined(fmt::format(
            "the inline if-expression on line {} evaluated to false and no else section was "
            "defined.",
            expr.line));
      }
      case ExprKind::kList:
      case ExprKind::kTuple: {
        std::vector<Value> items;
        for (const ExprPtr& item : expr.items) items.push_back(eval(*item, scope));
        return Value::list(std::move(items), expr.kind == ExprKind::kTuple);
      }
      case ExprKind::kDict: {
        std::vector<std::pair<Value, Value>> items;
        for (size_t i = 0; i < expr.keys.size(); ++i) {
          Value key = eval(*expr.keys[i], scope);
          if (key.is_list() && !key.list().is_tuple) runtime_error("unhashable type: 'list'");
          if (key.is_dict()) runtime_error("unhashable type: 'dict'");
          items.emplace_back(std::move(key), eval(*expr.items[i], scope));
        }
        return Value::dict(std::move(items));
      }
    }
  } catch (JinjaError& error) {
    error.set_line_if_unknown(expr.line);
    throw;
  }
  runtime_error("unknown expression");
}

Value Evaluator::eval_binary(const Expr& expr, const ScopePtr& scope) {
  if (expr.name == "and") {
    Value left = eval(*expr.operand, scope);
    return left.truthy() ? eval(*expr.second, scope) : left;
  }
  if (expr.name == "or") {
    Value left = eval(*expr.operand, scope);
    return left.truthy() ? left : eval(*expr.second, scope);
  }
  const Value left = eval(*expr.operand, scope);
  const Value right = eval(*expr.second, scope);
  return binary_operator(*this, expr.name, left, right);
}

}  // namespace llamaserve::jinja
