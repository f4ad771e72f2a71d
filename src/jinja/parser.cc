#include "jinja/parser.h"

#include <charconv>
#include <cstdlib>
#include <initializer_list>

#include "jinja/errors.h"

namespace llamaserve::jinja {
namespace {

ExprPtr make_expr(ExprKind kind, int line) {
  auto expr = std::make_unique<Expr>();
  expr->kind = kind;
  expr->line = line;
  return expr;
}

StmtPtr make_stmt(StmtKind kind, int line) {
  auto stmt = std::make_unique<Stmt>();
  stmt->kind = kind;
  stmt->line = line;
  return stmt;
}

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : tokens_(tokens) {}

  Program run() {
    Program program;
    std::string end;
    program.body = parse_body({}, end);
    return program;
  }

 private:
  // Enters one level of nesting; the guard leaves it.
  struct DepthGuard {
    explicit DepthGuard(Parser& p) : parser(p) {
      if (++parser.depth_ > kMaxParseDepth) {
        fail(ErrorKind::kSyntax, parser.current().line, "template nested more than {} deep",
             kMaxParseDepth);
      }
    }
    ~DepthGuard() { --parser.depth_; }
    Parser& parser;
  };
  // A left-deep chain (a + b + c, x.y.z, v | f | g) nests one level per link.
  struct ChainGuard {
    explicit ChainGuard(Parser& p) : parser(p) {}
    void link() {
      ++links;
      if (++parser.depth_ > kMaxParseDepth) {
        fail(ErrorKind::kSyntax, parser.current().line, "template nested more than {} deep",
             kMaxParseDepth);
      }
    }
    ~ChainGuard() { parser.depth_ -= links; }
    Parser& parser;
    int links = 0;
  };

  const Token& current() const { return tokens_[pos_]; }
  const Token& peek(size_t ahead = 1) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  void advance() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool is_op(std::string_view op) const {
    return current().type == TokenType::kOperator && current().value == op;
  }
  bool is_name(std::string_view name) const {
    return current().type == TokenType::kName && current().value == name;
  }
  static std::string describe(const Token& token) {
    switch (token.type) {
      case TokenType::kText: return "template text";
      case TokenType::kPrintBegin: return "'{{'";
      case TokenType::kPrintEnd: return "'}}'";
      case TokenType::kBlockBegin: return "'{%'";
      case TokenType::kBlockEnd: return "'%}'";
      case TokenType::kEnd: return "end of template";
      case TokenType::kString: return "a string";
      default: return "'" + token.value + "'";
    }
  }
  [[noreturn]] void unexpected(std::string_view expected) const {
    fail(ErrorKind::kSyntax, current().line, "expected {}, got {}", expected, describe(current()));
  }
  void expect_op(std::string_view op) {
    if (!is_op(op)) unexpected(fmt::format("'{}'", op));
    advance();
  }
  std::string expect_name() {
    if (current().type != TokenType::kName) unexpected("a name");
    std::string name = current().value;
    advance();
    return name;
  }
  void expect_block_end() {
    if (current().type != TokenType::kBlockEnd) unexpected("'%}'");
    advance();
  }

  // Statements until a {% name %} tag whose name is in `ends` (left in `end`, the tag name
  // consumed, its arguments not), or the end of the template when `ends` is empty.
  Body parse_body(std::initializer_list<std::string_view> ends, std::string& end) {
    DepthGuard guard(*this);
    Body body;
    while (true) {
      const Token& token = current();
      switch (token.type) {
        case TokenType::kEnd:
          if (ends.size() == 0) return body;
          fail(ErrorKind::kSyntax, token.line, "unexpected end of template, expected '{}'",
               *(ends.end() - 1));
        case TokenType::kText: {
          StmtPtr stmt = make_stmt(StmtKind::kText, token.line);
          stmt->text = token.value;
          body.push_back(std::move(stmt));
          advance();
          break;
        }
        case TokenType::kPrintBegin: {
          advance();
          StmtPtr stmt = make_stmt(StmtKind::kPrint, token.line);
          stmt->expr = parse_tuple();
          if (current().type != TokenType::kPrintEnd) unexpected("'}}'");
          advance();
          body.push_back(std::move(stmt));
          break;
        }
        case TokenType::kBlockBegin: {
          advance();
          if (current().type != TokenType::kName) unexpected("a statement name");
          const std::string name = current().value;
          for (const std::string_view e : ends) {
            if (name == e) {
              end = name;
              advance();
              return body;
            }
          }
          body.push_back(parse_statement());
          break;
        }
        default: unexpected("a statement");
      }
    }
  }

  StmtPtr parse_statement() {
    const std::string name = current().value;
    const int line = current().line;
    advance();
    if (name == "if") return parse_if(line);
    if (name == "for") return parse_for(line);
    if (name == "set") return parse_set(line);
    if (name == "macro") return parse_macro(line);
    if (name == "call") return parse_call_block(line);
    if (name == "filter") return parse_filter_block(line);
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) fail(ErrorKind::kSyntax, line, "'{}' outside of a loop", name);
      expect_block_end();
      return make_stmt(name == "break" ? StmtKind::kBreak : StmtKind::kContinue, line);
    }
    if (name == "generation") {
      expect_block_end();
      StmtPtr stmt = make_stmt(StmtKind::kScope, line);
      std::string end;
      stmt->body = parse_body({"endgeneration"}, end);
      expect_block_end();
      return stmt;
    }
    fail(ErrorKind::kSyntax, line, "unknown tag '{}'", name);
  }

  StmtPtr parse_if(int line) {
    StmtPtr stmt = make_stmt(StmtKind::kIf, line);
    while (true) {
      stmt->conditions.push_back(parse_tuple());
      expect_block_end();
      std::string end;
      stmt->bodies.push_back(parse_body({"elif", "else", "endif"}, end));
      if (end == "elif") continue;
      if (end == "else") {
        expect_block_end();
        stmt->else_body = parse_body({"endif"}, end);
      }
      expect_block_end();
      return stmt;
    }
  }

  // Names separated by commas, optionally in parentheses: `a`, `a, b`, `(a, b)`.
  void parse_targets(Stmt& stmt) {
    const bool parens = is_op("(");
    if (parens) advance();
    stmt.targets.push_back(expect_name());
    while (is_op(",")) {
      stmt.unpack = true;
      advance();
      if (current().type != TokenType::kName) break;
      stmt.targets.push_back(expect_name());
    }
    if (parens) {
      stmt.unpack = true;
      expect_op(")");
    }
  }

  StmtPtr parse_for(int line) {
    StmtPtr stmt = make_stmt(StmtKind::kFor, line);
    parse_targets(*stmt);
    if (!is_name("in")) unexpected("'in'");
    advance();
    stmt->expr = parse_tuple(/*with_condexpr=*/false);
    if (is_name("if")) {
      advance();
      stmt->condition = parse_expression();
    }
    if (is_name("recursive")) fail(ErrorKind::kSyntax, line, "recursive loops are not supported");
    expect_block_end();
    std::string end;
    ++loop_depth_;
    stmt->body = parse_body({"else", "endfor"}, end);
    --loop_depth_;
    if (end == "else") {
      expect_block_end();
      stmt->else_body = parse_body({"endfor"}, end);
    }
    expect_block_end();
    return stmt;
  }

  StmtPtr parse_set(int line) {
    StmtPtr stmt = make_stmt(StmtKind::kSet, line);
    if (current().type == TokenType::kName && peek().type == TokenType::kOperator &&
        peek().value == "." && peek(2).type == TokenType::kName) {
      stmt->targets.push_back(expect_name());
      advance();
      stmt->attribute = expect_name();
    } else {
      parse_targets(*stmt);
    }
    if (is_op("=")) {
      advance();
      stmt->expr = parse_tuple();
      expect_block_end();
      return stmt;
    }
    if (stmt->unpack || !stmt->attribute.empty()) unexpected("'='");
    stmt->kind = StmtKind::kSetBlock;
    while (is_op("|")) {
      advance();
      stmt->filters.push_back(parse_filter(nullptr));
    }
    expect_block_end();
    std::string end;
    stmt->body = parse_body({"endset"}, end);
    expect_block_end();
    return stmt;
  }

  void parse_params(Stmt& stmt) {
    expect_op("(");
    while (!is_op(")")) {
      if (!stmt.params.empty()) expect_op(",");
      if (is_op(")")) break;
      Param param;
      param.name = expect_name();
      if (is_op("=")) {
        advance();
        param.default_value = parse_expression();
      } else if (!stmt.params.empty() && stmt.params.back().default_value) {
        fail(ErrorKind::kSyntax, current().line, "non-default argument follows default argument");
      }
      stmt.params.push_back(std::move(param));
    }
    advance();
  }

  StmtPtr parse_macro(int line) {
    StmtPtr stmt = make_stmt(StmtKind::kMacro, line);
    stmt->targets.push_back(expect_name());
    parse_params(*stmt);
    expect_block_end();
    std::string end;
    const int saved = loop_depth_;
    loop_depth_ = 0;
    stmt->body = parse_body({"endmacro"}, end);
    loop_depth_ = saved;
    expect_block_end();
    return stmt;
  }

  StmtPtr parse_call_block(int line) {
    StmtPtr stmt = make_stmt(StmtKind::kCallBlock, line);
    if (is_op("(")) parse_params(*stmt);
    stmt->expr = parse_expression();
    if (stmt->expr->kind != ExprKind::kCall) fail(ErrorKind::kSyntax, line, "expected a call");
    expect_block_end();
    std::string end;
    const int saved = loop_depth_;
    loop_depth_ = 0;
    stmt->body = parse_body({"endcall"}, end);
    loop_depth_ = saved;
    expect_block_end();
    return stmt;
  }

  StmtPtr parse_filter_block(int line) {
    StmtPtr stmt = make_stmt(StmtKind::kFilterBlock, line);
    stmt->filters.push_back(parse_filter(nullptr));
    while (is_op("|")) {
      advance();
      stmt->filters.push_back(parse_filter(nullptr));
    }
    expect_block_end();
    std::string end;
    stmt->body = parse_body({"endfilter"}, end);
    expect_block_end();
    return stmt;
  }

  // expression (',' expression)* → a tuple when there is a comma.
  ExprPtr parse_tuple(bool with_condexpr = true) {
    const int line = current().line;
    ExprPtr first = with_condexpr ? parse_expression() : parse_or();
    if (!is_op(",")) return first;
    ExprPtr tuple = make_expr(ExprKind::kTuple, line);
    tuple->items.push_back(std::move(first));
    while (is_op(",")) {
      advance();
      if (!starts_expression()) break;
      tuple->items.push_back(with_condexpr ? parse_expression() : parse_or());
    }
    return tuple;
  }

  bool starts_expression() const {
    const Token& t = current();
    if (t.type == TokenType::kName || t.type == TokenType::kString ||
        t.type == TokenType::kInteger || t.type == TokenType::kFloat) {
      return true;
    }
    return t.type == TokenType::kOperator &&
           (t.value == "(" || t.value == "[" || t.value == "{" || t.value == "-" || t.value == "+");
  }

  ExprPtr parse_expression() {
    DepthGuard guard(*this);
    ExprPtr expr = parse_or();
    ChainGuard chain(*this);
    while (is_name("if")) {
      chain.link();
      ExprPtr cond = make_expr(ExprKind::kConditional, current().line);
      advance();
      cond->operand = parse_or();
      cond->second = std::move(expr);
      if (is_name("else")) {
        advance();
        cond->third = parse_expression();
      }
      expr = std::move(cond);
    }
    return expr;
  }

  ExprPtr binary(std::string op, ExprPtr left, ExprPtr right, int line) {
    ExprPtr expr = make_expr(ExprKind::kBinary, line);
    expr->name = std::move(op);
    expr->operand = std::move(left);
    expr->second = std::move(right);
    return expr;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    ChainGuard chain(*this);
    while (is_name("or")) {
      chain.link();
      const int line = current().line;
      advance();
      left = binary("or", std::move(left), parse_and(), line);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    ChainGuard chain(*this);
    while (is_name("and")) {
      chain.link();
      const int line = current().line;
      advance();
      left = binary("and", std::move(left), parse_not(), line);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      ExprPtr expr = make_expr(ExprKind::kUnary, current().line);
      advance();
      expr->name = "not";
      expr->operand = parse_not();
      return expr;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    ExprPtr left = parse_math1();
    ChainGuard chain(*this);
    while (true) {
      chain.link();
      const int line = current().line;
      std::string op;
      if (current().type == TokenType::kOperator &&
          (is_op("==") || is_op("!=") || is_op("<") || is_op("<=") || is_op(">") || is_op(">="))) {
        op = current().value;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && peek().type == TokenType::kName && peek().value == "in") {
        op = "not in";
        advance();
        advance();
      } else {
        return left;
      }
      left = binary(op, std::move(left), parse_math1(), line);
    }
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    ChainGuard chain(*this);
    while (is_op("+") || is_op("-")) {
      chain.link();
      const int line = current().line;
      std::string op = current().value;
      advance();
      left = binary(op, std::move(left), parse_concat(), line);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    ChainGuard chain(*this);
    while (is_op("~")) {
      chain.link();
      const int line = current().line;
      advance();
      left = binary("~", std::move(left), parse_math2(), line);
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    ChainGuard chain(*this);
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      chain.link();
      const int line = current().line;
      std::string op = current().value;
      advance();
      left = binary(op, std::move(left), parse_pow(), line);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    ChainGuard chain(*this);
    while (is_op("**")) {
      chain.link();
      const int line = current().line;
      advance();
      left = binary("**", std::move(left), parse_unary(true), line);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr expr;
    if (is_op("-") || is_op("+")) {
      expr = make_expr(ExprKind::kUnary, current().line);
      expr->name = current().value;
      advance();
      expr->operand = parse_unary(false);
    } else {
      expr = parse_primary();
    }
    expr = parse_postfix(std::move(expr));
    if (with_filter) expr = parse_filter_expr(std::move(expr));
    return expr;
  }

  ExprPtr parse_primary() {
    const Token& token = current();
    const int line = token.line;
    switch (token.type) {
      case TokenType::kName: {
        ExprPtr expr = make_expr(ExprKind::kLiteral, line);
        const std::string& n = token.value;
        if (n == "true" || n == "True") {
          expr->value = Value::boolean(true);
        } else if (n == "false" || n == "False") {
          expr->value = Value::boolean(false);
        } else if (n == "none" || n == "None") {
          expr->value = Value::none();
        } else {
          expr->kind = ExprKind::kName;
          expr->name = n;
        }
        advance();
        return expr;
      }
      case TokenType::kString: {
        std::string text;
        while (current().type == TokenType::kString) {
          text += current().value;
          advance();
        }
        ExprPtr expr = make_expr(ExprKind::kLiteral, line);
        expr->value = Value::string(std::move(text));
        return expr;
      }
      case TokenType::kInteger: {
        ExprPtr expr = make_expr(ExprKind::kLiteral, line);
        int64_t value = 0;
        const auto [ptr, ec] =
            std::from_chars(token.value.data(), token.value.data() + token.value.size(), value);
        if (ec != std::errc()) {
          expr->value = Value::number(std::strtod(token.value.c_str(), nullptr));
        } else {
          expr->value = Value::integer(value);
        }
        advance();
        return expr;
      }
      case TokenType::kFloat: {
        ExprPtr expr = make_expr(ExprKind::kLiteral, line);
        expr->value = Value::number(std::strtod(token.value.c_str(), nullptr));
        advance();
        return expr;
      }
      case TokenType::kOperator: {
        if (token.value == "(") {
          advance();
          if (is_op(")")) {
            advance();
            return make_expr(ExprKind::kTuple, line);
          }
          ExprPtr first = parse_expression();
          if (is_op(")")) {
            advance();
            return first;
          }
          ExprPtr tuple = make_expr(ExprKind::kTuple, line);
          tuple->items.push_back(std::move(first));
          while (is_op(",")) {
            advance();
            if (is_op(")")) break;
            tuple->items.push_back(parse_expression());
          }
          expect_op(")");
          return tuple;
        }
        if (token.value == "[") {
          advance();
          ExprPtr list = make_expr(ExprKind::kList, line);
          while (!is_op("]")) {
            if (!list->items.empty()) expect_op(",");
            if (is_op("]")) break;
            list->items.push_back(parse_expression());
          }
          advance();
          return list;
        }
        if (token.value == "{") {
          advance();
          ExprPtr dict = make_expr(ExprKind::kDict, line);
          while (!is_op("}")) {
            if (!dict->items.empty()) expect_op(",");
            if (is_op("}")) break;
            dict->keys.push_back(parse_expression());
            expect_op(":");
            dict->items.push_back(parse_expression());
          }
          advance();
          return dict;
        }
        break;
      }
      default: break;
    }
    unexpected("an expression");
  }

  ExprPtr parse_postfix(ExprPtr expr) {
    ChainGuard chain(*this);
    while (true) {
      chain.link();
      const int line = current().line;
      if (is_op(".")) {
        advance();
        ExprPtr get = make_expr(ExprKind::kGetAttr, line);
        if (current().type == TokenType::kInteger) {
          get->kind = ExprKind::kGetItem;
          get->second = make_expr(ExprKind::kLiteral, line);
          get->second->value = Value::integer(std::atoll(current().value.c_str()));
          advance();
        } else {
          get->name = expect_name();
        }
        get->operand = std::move(expr);
        expr = std::move(get);
      } else if (is_op("[")) {
        advance();
        expr = parse_subscript(std::move(expr), line);
      } else if (is_op("(")) {
        expr = parse_call(std::move(expr));
      } else {
        return expr;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr object, int line) {
    DepthGuard guard(*this);
    ExprPtr parts[3];
    bool is_slice = false;
    int part = 0;
    while (!is_op("]")) {
      if (is_op(":")) {
        is_slice = true;
        if (++part > 2) unexpected("']'");
        advance();
        continue;
      }
      if (parts[part]) unexpected("':' or ']'");
      parts[part] = parse_expression();
      if (!is_slice && is_op(",")) {
        // obj[a, b] indexes with a tuple
        ExprPtr tuple = make_expr(ExprKind::kTuple, line);
        tuple->items.push_back(std::move(parts[part]));
        while (is_op(",")) {
          advance();
          if (is_op("]")) break;
          tuple->items.push_back(parse_expression());
        }
        parts[part] = std::move(tuple);
      }
    }
    advance();
    if (!is_slice && !parts[0]) fail(ErrorKind::kSyntax, line, "expected a subscript");
    ExprPtr expr = make_expr(is_slice ? ExprKind::kSlice : ExprKind::kGetItem, line);
    expr->operand = std::move(object);
    expr->second = std::move(parts[0]);
    expr->third = std::move(parts[1]);
    expr->fourth = std::move(parts[2]);
    return expr;
  }

  // ( positional..., name=value... )
  void parse_arguments(Expr& call) {
    DepthGuard guard(*this);
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (current().type == TokenType::kName && peek().type == TokenType::kOperator &&
          peek().value == "=") {
        std::string name = expect_name();
        advance();
        call.keyword.emplace_back(std::move(name), parse_expression());
      } else {
        if (!call.keyword.empty()) {
          fail(ErrorKind::kSyntax, current().line, "positional argument after keyword argument");
        }
        if (is_op("*") || is_op("**")) {
          fail(ErrorKind::kSyntax, current().line, "*args and **kwargs are not supported");
        }
        call.items.push_back(parse_expression());
      }
    }
    advance();
  }

  ExprPtr parse_call(ExprPtr callee) {
    ExprPtr call = make_expr(ExprKind::kCall, current().line);
    call->operand = std::move(callee);
    parse_arguments(*call);
    return call;
  }

  std::string parse_dotted_name() {
    std::string name = expect_name();
    while (is_op(".") && peek().type == TokenType::kName) {
      advance();
      name += "." + expect_name();
    }
    return name;
  }

  ExprPtr parse_filter(ExprPtr operand) {
    ExprPtr filter = make_expr(ExprKind::kFilter, current().line);
    filter->name = parse_dotted_name();
    filter->operand = std::move(operand);
    if (is_op("(")) parse_arguments(*filter);
    return filter;
  }

  ExprPtr parse_filter_expr(ExprPtr expr) {
    ChainGuard chain(*this);
    while (true) {
      chain.link();
      if (is_op("|")) {
        advance();
        expr = parse_filter(std::move(expr));
      } else if (is_name("is")) {
        ExprPtr test = make_expr(ExprKind::kTest, current().line);
        advance();
        if (is_name("not")) {
          test->negated = true;
          advance();
        }
        test->name = parse_dotted_name();
        test->operand = std::move(expr);
        if (is_op("(")) {
          parse_arguments(*test);
        } else if (starts_argument()) {
          DepthGuard guard(*this);
          test->items.push_back(parse_postfix(parse_primary()));
        }
        expr = std::move(test);
      } else if (is_op("(")) {
        expr = parse_call(std::move(expr));
      } else {
        return expr;
      }
    }
  }

  // A test's single argument without parentheses: `is divisibleby 3`, `is sameas false`.
  bool starts_argument() const {
    const Token& t = current();
    if (t.type == TokenType::kName) {
      return t.value != "else" && t.value != "or" && t.value != "and" && t.value != "is" &&
             t.value != "if" && t.value != "in" && t.value != "not";
    }
    if (t.type == TokenType::kString || t.type == TokenType::kInteger ||
        t.type == TokenType::kFloat) {
      return true;
    }
    return t.type == TokenType::kOperator && (t.value == "[" || t.value == "{");
  }

  const std::vector<Token>& tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Program parse(const std::vector<Token>& tokens) { return Parser(tokens).run(); }

}  // namespace llamaserve::jinja
