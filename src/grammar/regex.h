// A subset of ECMA-262 regular expressions (JSON Schema's "pattern"), compiled into grammar
// states that match the body of a JSON string (between its quotes) whose decoded text the
// pattern matches. Characters that JSON must escape are produced in their escaped form ('"'
// as \", newline as \n); other escapes are never produced.
//
// Supported: literals (ASCII, and UTF-8 characters outside classes), '.', classes [a-z0-9_]
// and [^...] with ASCII members, \d \D \w \W \s \S, escaped metacharacters, \n \r \t \f \v,
// \xHH and \uHHHH for ASCII, groups (...), (?:...), (?<name>...), alternation '|',
// quantifiers * + ? {n} {n,} {n,m} (lazy forms match the same strings), '^' at the start and
// '$' at the end. Without '^' (or '$') any text may come before (or after) the match, as
// JSON Schema patterns are not anchored. Negated classes, \D \W \S and '.' also match any
// non-ASCII character.
//
// Anything else (backreferences, lookaround, \b, \p{...}, anchors inside the pattern,
// non-ASCII class members) is an error naming the feature.
#pragma once

#include <string_view>

#include "core/status.h"
#include "grammar/grammar.h"

namespace llamaserve::grammar {

// Adds states from `from` to `to` for the string bodies matching `pattern`. Counted
// repetitions are expanded; past `max_states` states in the builder it fails.
Status add_pattern(GrammarBuilder& builder, std::string_view pattern, StateId from, StateId to,
                   size_t max_states);

}  // namespace llamaserve::grammar
