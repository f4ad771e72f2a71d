// The syntax tree of a template. Nodes are owned by their parent through unique_ptr; the
// evaluator walks them (evaluator.cc), the parser builds them (parser.cc).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace llamaserve::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind {
  kLiteral,      // value
  kName,         // name
  kGetAttr,      // object.name
  kGetItem,      // object[index]
  kSlice,        // object[start:stop:step] (operands may be null)
  kCall,         // callee(args)
  kFilter,       // operand | name(args); operand null inside {% filter %} and block set
  kTest,         // operand is [not] name(args)
  kUnary,        // op operand: "not", "-", "+"
  kBinary,       // left op right
  kConditional,  // then if condition else otherwise (otherwise may be null)
  kList,         // [items]
  kTuple,        // (items)
  kDict,         // {keys[i]: items[i]}
};

struct Expr {
  ExprKind kind;
  int line = 0;
  Value value;                 // kLiteral
  std::string name;            // kName, kGetAttr, kFilter, kTest; operator of kUnary/kBinary
  ExprPtr operand;             // object / callee / left / condition
  ExprPtr second;              // index / right / then
  ExprPtr third;               // otherwise; slice stop
  ExprPtr fourth;              // slice step
  std::vector<ExprPtr> items;  // call positional arguments; list/tuple items; dict values
  std::vector<ExprPtr> keys;   // dict keys
  std::vector<std::pair<std::string, ExprPtr>> keyword;  // call keyword arguments
  bool negated = false;                                  // kTest: `is not`
};

enum class StmtKind {
  kText,         // text
  kPrint,        // {{ expr }}
  kIf,           // conditions[i] → bodies[i]; else_body
  kFor,          // for targets in expr [if condition]: body else else_body
  kSet,          // set targets = expr, or set object.attribute = expr (attribute non-empty)
  kSetBlock,     // set target [| filters]: body
  kMacro,        // macro name(params = defaults): body
  kCallBlock,    // call(params) expr: body
  kFilterBlock,  // filter filters: body
  kBreak,
  kContinue,
  kScope,  // a body rendered in place ({% generation %})
};

struct Param {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;                 // kText
  ExprPtr expr;                     // printed / iterated / assigned / called
  ExprPtr condition;                // for ... if condition
  std::vector<ExprPtr> conditions;  // kIf
  std::vector<Body> bodies;         // kIf
  Body body;
  Body else_body;
  std::vector<std::string> targets;  // for / set names; kMacro: name in targets[0]
  bool unpack = false;               // the target was a tuple
  std::string attribute;             // kSet: set targets[0].attribute = expr
  std::vector<Param> params;         // kMacro, kCallBlock
  std::vector<ExprPtr> filters;      // kSetBlock, kFilterBlock: kFilter nodes, operand null
};

struct Program {
  Body body;
};

}  // namespace llamaserve::jinja
