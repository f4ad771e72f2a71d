// Helpers for the grammar tests: compile a schema from text, run bytes through a matcher.
#pragma once

#include <string>
#include <string_view>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "grammar/matcher.h"
#include "grammar/schema_compiler.h"

namespace llamaserve::grammar::testing {

inline Grammar compile(std::string_view schema_text, const CompileOptions& options = {}) {
  auto grammar = compile_json_schema(nlohmann::ordered_json::parse(schema_text), options);
  EXPECT_TRUE(grammar.is_ok()) << schema_text << ": " << grammar.status().to_string();
  return grammar.is_ok() ? std::move(grammar).value() : compile_json_object().value();
}

// The whole text is a complete document.
inline bool accepts(const Grammar& grammar, std::string_view text) {
  Matcher matcher(grammar);
  return matcher.advance(text) && matcher.is_complete();
}

// The text can be continued into a document (complete or not).
inline bool viable_prefix(const Grammar& grammar, std::string_view text) {
  Matcher matcher(grammar);
  return matcher.advance(text);
}

inline Status compile_error(std::string_view schema_text) {
  auto grammar = compile_json_schema(nlohmann::ordered_json::parse(schema_text));
  if (grammar.is_ok()) return Status::ok();
  return grammar.status();
}

}  // namespace llamaserve::grammar::testing
