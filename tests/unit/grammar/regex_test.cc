// "pattern": the regular expression subset, through the JSON string it constrains.
#include <gtest/gtest.h>

#include "grammar_test_support.h"

namespace llamaserve::grammar {
namespace {

using testing::accepts;
using testing::compile;

Grammar pattern(const std::string& regex) {
  return compile(nlohmann::ordered_json{{"type", "string"}, {"pattern", regex}}.dump());
}

bool matches(const Grammar& g, const std::string& text) {
  return accepts(g, nlohmann::json(text).dump());
}

TEST(Regex, AnchoredLiteralsClassesAndCounts) {
  const Grammar g = pattern("^[A-Z]{2}-\\d{3,4}$");
  EXPECT_TRUE(matches(g, "AB-123"));
  EXPECT_TRUE(matches(g, "ZZ-0000"));
  EXPECT_FALSE(matches(g, "AB-12"));
  EXPECT_FALSE(matches(g, "AB-12345"));
  EXPECT_FALSE(matches(g, "ab-123"));
  EXPECT_FALSE(matches(g, "xAB-123"));
}

TEST(Regex, UnanchoredAllowsTextAround) {
  const Grammar g = pattern("ab+c");
  EXPECT_TRUE(matches(g, "abbc"));
  EXPECT_TRUE(matches(g, "xx abc yy"));
  EXPECT_FALSE(matches(g, "ac"));
  const Grammar start_only = pattern("^a");
  EXPECT_TRUE(matches(start_only, "a whatever"));
  EXPECT_FALSE(matches(start_only, "ba"));
}

TEST(Regex, AlternationGroupsAndQuantifiers) {
  const Grammar g = pattern("^(cat|dog)s?(?:!{1,2})?$");
  for (const char* ok : {"cat", "dogs", "cat!", "dogs!!"}) EXPECT_TRUE(matches(g, ok)) << ok;
  for (const char* bad : {"cats!!!", "bird", "ca", ""}) EXPECT_FALSE(matches(g, bad)) << bad;
  const Grammar star = pattern("^a*b*$");
  EXPECT_TRUE(matches(star, ""));
  EXPECT_TRUE(matches(star, "aaabb"));
  EXPECT_FALSE(matches(star, "aba"));
  const Grammar named = pattern("^(?<year>\\d{4})$");
  EXPECT_TRUE(matches(named, "2024"));
  const Grammar lazy = pattern("^a+?$");
  EXPECT_TRUE(matches(lazy, "aaa"));
}

TEST(Regex, CharactersJsonEscapes) {
  const Grammar quote = pattern("^a\"b$");
  EXPECT_TRUE(accepts(quote, R"("a\"b")"));
  EXPECT_FALSE(accepts(quote, R"("ab")"));
  const Grammar newline = pattern("^a\\nb$");
  EXPECT_TRUE(accepts(newline, R"("a\nb")"));
  const Grammar backslash = pattern("^\\\\$");
  EXPECT_TRUE(accepts(backslash, R"("\\")"));
}

TEST(Regex, DotNegatedClassesAndUnicode) {
  const Grammar dot = pattern("^.$");
  EXPECT_TRUE(matches(dot, "x"));
  EXPECT_TRUE(matches(dot, "\xC3\xA9"));
  EXPECT_FALSE(matches(dot, "xy"));
  const Grammar negated = pattern("^[^0-9]+$");
  EXPECT_TRUE(matches(negated, "abc\xE2\x82\xAC"));
  EXPECT_FALSE(matches(negated, "a1"));
  const Grammar literal = pattern("^caf\xC3\xA9$");
  EXPECT_TRUE(matches(literal, "caf\xC3\xA9"));
  EXPECT_FALSE(matches(literal, "cafe"));
  const Grammar word = pattern("^\\w+@\\w+\\.com$");
  EXPECT_TRUE(matches(word, "joe@example.com"));
  EXPECT_FALSE(matches(word, "joe@example.org"));
}

TEST(Regex, ErrorsNameTheFeature) {
  for (const char* bad :
       {"(a", "a)", "[a", "a{2,1}", "*a", "\\p{L}", "(?!a)", "[é]", "a**", "\\1", "a$b", "\\q"}) {
    auto grammar =
        compile_json_schema(nlohmann::ordered_json{{"type", "string"}, {"pattern", bad}});
    EXPECT_FALSE(grammar.is_ok()) << bad;
    if (!grammar.is_ok()) {
      EXPECT_NE(grammar.status().message().find("pattern"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace llamaserve::grammar
