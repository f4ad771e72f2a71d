// Walks a parsed template and renders it: scopes, statements, expressions, macros, and the
// limits that stop a template that loops forever, renders megabytes or recurses without end.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "jinja/ast.h"
#include "jinja/value.h"

namespace llamaserve::jinja {

struct RenderLimits {
  size_t max_output_bytes = size_t{16} << 20;  // also the largest string a template may build
  uint64_t max_steps = 5'000'000;              // statements + expressions evaluated
  int max_call_depth = 64;                     // nested macro / caller calls
};

// Variables of one level: the globals, a macro call, one loop iteration.
struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
  Value* find(const std::string& name);
};
using ScopePtr = std::shared_ptr<Scope>;

class Evaluator {
 public:
  Evaluator(const RenderLimits& limits, ScopePtr globals)
      : limits_(limits), globals_(std::move(globals)) {}

  // The output of `program`, with the provenance of its bytes. Throws JinjaError.
  StringData render(const Program& program);

  // For builtins.
  void step(uint64_t count = 1);
  void check_size(size_t bytes) const;
  Value call(const Value& callee, Arguments& args);
  Value call_macro(const Stmt& macro, const std::weak_ptr<Scope>& defined_in, Arguments& args);
  Value apply_filter(const std::string& name, const Value& input, Arguments& args);
  bool apply_test(const std::string& name, const Value& input, Arguments& args);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  struct DepthGuard;

  Flow exec(const Body& body, const ScopePtr& scope);
  Flow exec(const Stmt& stmt, const ScopePtr& scope);
  void exec_for(const Stmt& stmt, const ScopePtr& scope, Flow& flow);
  void exec_set(const Stmt& stmt, const ScopePtr& scope);
  void exec_macro(const Stmt& stmt, const ScopePtr& scope);
  void exec_call_block(const Stmt& stmt, const ScopePtr& scope);
  Value capture(const Body& body, const ScopePtr& scope);
  Value apply_filter_chain(const std::vector<ExprPtr>& filters, Value value, const ScopePtr& scope);

  Value eval(const Expr& expr, const ScopePtr& scope);
  Value eval_binary(const Expr& expr, const ScopePtr& scope);
  Arguments eval_arguments(const Expr& expr, const ScopePtr& scope, Value* first = nullptr);
  void emit(const Value& value);

  RenderLimits limits_;
  ScopePtr globals_;
  TextBuilder* out_ = nullptr;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
  int eval_depth_ = 0;
};

// Python's arithmetic, comparison and membership operators on values ("+", "//", "in", ...).
Value binary_operator(Evaluator& ev, const std::string& op, const Value& left, const Value& right);
// obj.name and obj[key] as jinja2 resolves them: for dicts the key first for [] and methods
// first for '.', undefined when missing.
Value get_attribute(const Value& object, const std::string& name);
Value get_item(const Value& object, const Value& key);

}  // namespace llamaserve::jinja
