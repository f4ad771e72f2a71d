// Tokens → syntax tree, with jinja2's grammar and operator precedence (lowest first):
//   conditional (a if b else c), or, and, not, comparisons and in / not in, + -, ~, * / // %,
//   **, unary - +, then postfix (.name [index] [a:b:c] (args)) followed by | filters and
//   `is` tests.
// Statements: if/elif/else, for (targets, else, filtering if), set (name, tuple, ns.attr,
// block), macro, call, filter, break, continue, generation.
#pragma once

#include <vector>

#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace llamaserve::jinja {

// Nesting deeper than this (brackets, blocks, operators) is a syntax error rather than a deep
// recursion.
inline constexpr int kMaxParseDepth = 256;

// Throws JinjaError (kSyntax) with the line of the offending token.
Program parse(const std::vector<Token>& tokens);

}  // namespace llamaserve::jinja
