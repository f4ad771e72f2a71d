// JSON Schema features one by one: documents the compiled grammar must accept and reject,
// and the errors for what is not supported.
#include <gtest/gtest.h>

#include "grammar_test_support.h"

namespace llamaserve::grammar {
namespace {

using testing::accepts;
using testing::compile;
using testing::compile_error;
using testing::viable_prefix;

TEST(SchemaCompiler, JsonObjectAcceptsAnyObjectOnly) {
  const Grammar g = compile_json_object().value();
  EXPECT_TRUE(accepts(g, "{}"));
  EXPECT_TRUE(accepts(g, R"({"a":1,"b":[true,null,"x"],"c":{"d":-1.5e3}})"));
  EXPECT_TRUE(accepts(g, "{ \"a\" : [ 1 , 2 ] }"));
  EXPECT_TRUE(accepts(g, "{\n  \"a\": \"\\u00e9\\n\"\n}"));
  EXPECT_TRUE(accepts(g, "{\"k\":\"caf\xC3\xA9\"}"));
  EXPECT_FALSE(accepts(g, "[]"));
  EXPECT_FALSE(accepts(g, "\"x\""));
  EXPECT_FALSE(accepts(g, "{\"a\":1,}"));
  EXPECT_FALSE(accepts(g, "{\"a\" 1}"));
  EXPECT_FALSE(accepts(g, "{\"a\":01}"));
  EXPECT_FALSE(accepts(g, "{\"a\":\"\n\"}"));  // raw control character in a string
  EXPECT_FALSE(accepts(g, "{\"a\":\"\\x\"}"));
  EXPECT_FALSE(accepts(g, " {}"));  // no whitespace before the document
  EXPECT_FALSE(accepts(g, "{} "));  // nor after it
  EXPECT_FALSE(accepts(g, "{\"a\":1"));
  EXPECT_TRUE(viable_prefix(g, "{\"a\":1"));
}

TEST(SchemaCompiler, WhitespaceIsBounded) {
  CompileOptions options;
  options.max_whitespace = 3;
  const Grammar g = compile_json_object(options).value();
  EXPECT_TRUE(accepts(g, "{   }"));
  EXPECT_FALSE(viable_prefix(g, "{    "));
  options.max_whitespace = 0;
  const Grammar compact = compile_json_object(options).value();
  EXPECT_TRUE(accepts(compact, R"({"a":[1,2]})"));
  EXPECT_FALSE(accepts(compact, R"({"a": 1})"));
}

TEST(SchemaCompiler, ScalarTypes) {
  const Grammar s = compile(R"({"type":"string"})");
  EXPECT_TRUE(accepts(s, R"("hello")"));
  EXPECT_TRUE(accepts(s, R"("")"));
  EXPECT_FALSE(accepts(s, "1"));
  const Grammar b = compile(R"({"type":"boolean"})");
  EXPECT_TRUE(accepts(b, "true"));
  EXPECT_TRUE(accepts(b, "false"));
  EXPECT_FALSE(accepts(b, "null"));
  const Grammar n = compile(R"({"type":"null"})");
  EXPECT_TRUE(accepts(n, "null"));
  EXPECT_FALSE(accepts(n, "nul"));
  const Grammar num = compile(R"({"type":"number"})");
  for (const char* ok : {"0", "-0", "12", "-3.25", "1e5", "1.5E-3", "0.0"}) {
    EXPECT_TRUE(accepts(num, ok)) << ok;
  }
  for (const char* bad : {"01", "1.", ".5", "+1", "1e", "--1", "1.5.2"}) {
    EXPECT_FALSE(accepts(num, bad)) << bad;
  }
  const Grammar i = compile(R"({"type":"integer"})");
  EXPECT_TRUE(accepts(i, "-42"));
  EXPECT_FALSE(accepts(i, "4.2"));
  EXPECT_FALSE(accepts(i, "1e3"));
  EXPECT_FALSE(accepts(i, "1234567890123456"));  // 16 digits: past the default cap
  EXPECT_TRUE(accepts(i, "123456789012345"));
}

TEST(SchemaCompiler, TypeListAndEmptySchema) {
  const Grammar g = compile(R"({"type":["string","null"]})");
  EXPECT_TRUE(accepts(g, "null"));
  EXPECT_TRUE(accepts(g, R"("x")"));
  EXPECT_FALSE(accepts(g, "1"));
  const Grammar any = compile("{}");
  EXPECT_TRUE(accepts(any, "[1,{\"a\":null}]"));
  EXPECT_TRUE(accepts(any, "3.5"));
}

TEST(SchemaCompiler, ObjectPropertiesInSchemaOrder) {
  const Grammar g = compile(R"({"type":"object","properties":{
      "name":{"type":"string"},"age":{"type":"integer"}},
      "required":["name","age"],"additionalProperties":false})");
  EXPECT_TRUE(accepts(g, R"({"name":"Ann","age":3})"));
  EXPECT_TRUE(accepts(g, R"({ "name" : "Ann" , "age" : 3 })"));
  EXPECT_FALSE(accepts(g, R"({"age":3,"name":"Ann"})"));
  EXPECT_FALSE(accepts(g, R"({"name":"Ann"})"));
  EXPECT_FALSE(accepts(g, R"({"name":"Ann","age":3,"x":1})"));
  EXPECT_FALSE(accepts(g, R"({"name":1,"age":3})"));
}

TEST(SchemaCompiler, OptionalProperties) {
  const Grammar g = compile(R"({"type":"object","properties":{
      "a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}},
      "required":["b"]})");
  EXPECT_TRUE(accepts(g, R"({"b":1})"));
  EXPECT_TRUE(accepts(g, R"({"a":0,"b":1})"));
  EXPECT_TRUE(accepts(g, R"({"b":1,"c":2})"));
  EXPECT_TRUE(accepts(g, R"({"a":0,"b":1,"c":2})"));
  EXPECT_FALSE(accepts(g, R"({"a":0})"));
  EXPECT_FALSE(accepts(g, R"({"a":0,"c":2})"));
  EXPECT_FALSE(accepts(g, R"({,"b":1})"));
  EXPECT_FALSE(accepts(g, R"({"b":1,})"));
  const Grammar none_required = compile(R"({"properties":{"a":{"type":"integer"}}})");
  EXPECT_TRUE(accepts(none_required, "{}"));
  EXPECT_TRUE(accepts(none_required, R"({"a":1})"));
}

TEST(SchemaCompiler, MapsAndAdditionalProperties) {
  const Grammar map = compile(R"({"type":"object","additionalProperties":{"type":"integer"}})");
  EXPECT_TRUE(accepts(map, R"({"x":1,"y":2})"));
  EXPECT_FALSE(accepts(map, R"({"x":"1"})"));
  const Grammar empty = compile(R"({"type":"object","additionalProperties":false})");
  EXPECT_TRUE(accepts(empty, "{}"));
  EXPECT_FALSE(accepts(empty, R"({"x":1})"));
  const Grammar free = compile(R"({"type":"object"})");
  EXPECT_TRUE(accepts(free, R"({"x":[1]})"));
}

TEST(SchemaCompiler, NestedObjects) {
  const Grammar g = compile(R"({"type":"object","properties":{"p":{"type":"object",
      "properties":{"q":{"type":"object","properties":{"r":{"type":"boolean"}},
      "required":["r"]}},"required":["q"]}},"required":["p"]})");
  EXPECT_TRUE(accepts(g, R"({"p":{"q":{"r":true}}})"));
  EXPECT_FALSE(accepts(g, R"({"p":{"q":{"r":1}}})"));
  EXPECT_FALSE(accepts(g, R"({"p":{"q":{}}})"));
}

TEST(SchemaCompiler, EnumAndConst) {
  const Grammar g = compile(R"({"enum":["red","green",3,null,{"a":[1]}]})");
  for (const char* ok : {R"("red")", R"("green")", "3", "null", R"({"a":[1]})"}) {
    EXPECT_TRUE(accepts(g, ok)) << ok;
  }
  EXPECT_FALSE(accepts(g, R"("blue")"));
  EXPECT_FALSE(accepts(g, R"("re")"));
  const Grammar c = compile(R"({"const":"x\"y"})");
  EXPECT_TRUE(accepts(c, R"("x\"y")"));
  EXPECT_FALSE(accepts(c, R"("xy")"));
}

TEST(SchemaCompiler, ArraysWithItemCounts) {
  const Grammar g = compile(R"({"type":"array","items":{"type":"integer"},
      "minItems":2,"maxItems":3})");
  EXPECT_FALSE(accepts(g, "[]"));
  EXPECT_FALSE(accepts(g, "[1]"));
  EXPECT_TRUE(accepts(g, "[1,2]"));
  EXPECT_TRUE(accepts(g, "[1, 2, 3]"));
  EXPECT_FALSE(accepts(g, "[1,2,3,4]"));
  EXPECT_FALSE(viable_prefix(g, "[1,2,3,"));
  EXPECT_FALSE(accepts(g, "[1,\"2\"]"));
  const Grammar unbounded = compile(R"({"type":"array","items":{"type":"boolean"}})");
  EXPECT_TRUE(accepts(unbounded, "[]"));
  EXPECT_TRUE(accepts(unbounded, "[true,false,true,true,false]"));
  EXPECT_FALSE(accepts(unbounded, "[true,]"));
  const Grammar at_least = compile(R"({"type":"array","minItems":3})");
  EXPECT_FALSE(accepts(at_least, "[1,2]"));
  EXPECT_TRUE(accepts(at_least, "[1,\"a\",null,4,5]"));
}

TEST(SchemaCompiler, AnyOfAndOneOf) {
  const Grammar g = compile(R"({"anyOf":[{"type":"integer"},
      {"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}]})");
  EXPECT_TRUE(accepts(g, "7"));
  EXPECT_TRUE(accepts(g, R"({"a":"x"})"));
  EXPECT_FALSE(accepts(g, R"("x")"));
  const Grammar one = compile(R"({"oneOf":[{"const":1},{"const":2}]})");
  EXPECT_TRUE(accepts(one, "2"));
  EXPECT_FALSE(accepts(one, "3"));
  // Overlapping alternatives are followed together.
  const Grammar overlap = compile(R"({"anyOf":[
      {"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"]},
      {"type":"object","properties":{"a":{"type":"integer"},"c":{"type":"string"}},"required":["a","c"]}]})");
  EXPECT_TRUE(accepts(overlap, R"({"a":1,"b":2})"));
  EXPECT_TRUE(accepts(overlap, R"({"a":1,"c":"x"})"));
  EXPECT_FALSE(accepts(overlap, R"({"a":1,"c":2})"));
}

TEST(SchemaCompiler, StringLengths) {
  const Grammar g = compile(R"({"type":"string","minLength":2,"maxLength":4})");
  EXPECT_FALSE(accepts(g, R"("a")"));
  EXPECT_TRUE(accepts(g, R"("ab")"));
  EXPECT_TRUE(accepts(g, R"("abcd")"));
  EXPECT_FALSE(accepts(g, R"("abcde")"));
  EXPECT_TRUE(accepts(g, "\"\xC3\xA9\xC3\xA9\""));  // two characters, four bytes
  EXPECT_TRUE(accepts(g, R"("\n\u0041")"));         // escapes count as one character each
  const Grammar at_least = compile(R"({"type":"string","minLength":3})");
  EXPECT_FALSE(accepts(at_least, R"("ab")"));
  EXPECT_TRUE(accepts(at_least, R"("abcdefgh")"));
}

TEST(SchemaCompiler, IntegerRanges) {
  const Grammar g = compile(R"({"type":"integer","minimum":-15,"maximum":230})");
  for (int v = -40; v <= 400; ++v) {
    EXPECT_EQ(accepts(g, std::to_string(v)), v >= -15 && v <= 230) << v;
  }
  EXPECT_FALSE(accepts(g, "007"));
  EXPECT_FALSE(accepts(g, "-0"));
  const Grammar exclusive =
      compile(R"({"type":"integer","exclusiveMinimum":9,"exclusiveMaximum":12.5})");
  for (int v = 0; v <= 20; ++v) {
    EXPECT_EQ(accepts(exclusive, std::to_string(v)), v >= 10 && v <= 12) << v;
  }
  const Grammar lower = compile(R"({"type":"integer","minimum":1000})");
  EXPECT_FALSE(accepts(lower, "999"));
  EXPECT_TRUE(accepts(lower, "1000"));
  EXPECT_TRUE(accepts(lower, "98765432"));
  EXPECT_FALSE(accepts(lower, "-1"));
  const Grammar number = compile(R"({"type":"number","minimum":0.5,"maximum":3})");
  EXPECT_FALSE(accepts(number, "0"));
  EXPECT_TRUE(accepts(number, "1"));
  EXPECT_TRUE(accepts(number, "3"));
  EXPECT_FALSE(accepts(number, "4"));
}

TEST(SchemaCompiler, RefsToDefs) {
  const Grammar g = compile(R"({"$defs":{"point":{"type":"object","properties":{
      "x":{"type":"integer"},"y":{"type":"integer"}},"required":["x","y"]}},
      "type":"object","properties":{"a":{"$ref":"#/$defs/point"},
      "b":{"$ref":"#/definitions/name"}},"required":["a","b"],
      "definitions":{"name":{"type":"string","maxLength":3}}})");
  EXPECT_TRUE(accepts(g, R"({"a":{"x":1,"y":2},"b":"abc"})"));
  EXPECT_FALSE(accepts(g, R"({"a":{"x":1},"b":"abc"})"));
  EXPECT_FALSE(accepts(g, R"({"a":{"x":1,"y":2},"b":"abcd"})"));
}

TEST(SchemaCompiler, RecursiveRefs) {
  const Grammar g = compile(R"({"$defs":{"node":{"type":"object","properties":{
      "v":{"type":"integer"},"children":{"type":"array","items":{"$ref":"#/$defs/node"}}},
      "required":["v","children"]}},"$ref":"#/$defs/node"})");
  EXPECT_TRUE(accepts(g, R"({"v":1,"children":[]})"));
  EXPECT_TRUE(accepts(g, R"({"v":1,"children":[{"v":2,"children":[{"v":3,"children":[]}]}]})"));
  EXPECT_FALSE(accepts(g, R"({"v":1,"children":[{"v":2}]})"));
  // Nesting past the matcher's stack limit is cut off.
  std::string deep;
  for (int k = 0; k < 100; ++k) deep += R"({"v":1,"children":[)";
  EXPECT_FALSE(viable_prefix(g, deep));
}

TEST(SchemaCompiler, LeftRecursiveRefDoesNotHang) {
  const Grammar g = compile(R"({"anyOf":[{"$ref":"#"},{"type":"integer"}]})");
  EXPECT_TRUE(accepts(g, "5"));
  EXPECT_FALSE(accepts(g, "x"));
}

TEST(SchemaCompiler, FormatsAsPatterns) {
  const Grammar date = compile(R"({"type":"string","format":"date"})");
  EXPECT_TRUE(accepts(date, R"("2024-02-29")"));
  EXPECT_FALSE(accepts(date, R"("2024-13-01")"));
  EXPECT_FALSE(accepts(date, R"("24-01-01")"));
  const Grammar uuid = compile(R"({"type":"string","format":"uuid"})");
  EXPECT_TRUE(accepts(uuid, R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_FALSE(accepts(uuid, R"("123e4567")"));
  const Grammar email = compile(R"({"type":"string","format":"email"})");  // annotation only
  EXPECT_TRUE(accepts(email, R"("not an address")"));
}

TEST(SchemaCompiler, AnnotationsAreIgnored) {
  const Grammar g = compile(R"({"title":"T","description":"d","$schema":"x","default":1,
      "examples":[1],"x-vendor":true,"type":"integer"})");
  EXPECT_TRUE(accepts(g, "1"));
}

TEST(SchemaCompiler, UnsupportedFeaturesAreNamed) {
  struct Case {
    const char* schema;
    const char* mentions;
  };
  const Case cases[] = {
      {R"({"type":"array","uniqueItems":true})", "uniqueItems"},
      {R"({"not":{"type":"string"}})", "not"},
      {R"({"type":"object","patternProperties":{"a":{}}})", "patternProperties"},
      {R"({"type":"object","minProperties":1})", "minProperties"},
      {R"({"type":"number","multipleOf":2})", "multipleOf"},
      {R"({"if":{},"then":{}})", "if"},
      {R"({"type":"array","prefixItems":[{}]})", "prefixItems"},
      {R"({"type":"array","items":[{}]})", "prefixItems"},
      {R"({"allOf":[{"type":"string"},{"maxLength":2}]})", "allOf"},
      {R"({"$ref":"http://example.com/s.json"})", "$ref"},
      {R"({"$ref":"#/$defs/missing"})", "points at nothing"},
      {R"({"type":"string","pattern":"(a)\\1"})", "backreferences"},
      {R"({"type":"string","pattern":"(?=a)b"})", "lookaround"},
      {R"({"type":"string","pattern":"\\bword"})", "word boundaries"},
      {R"({"type":"string","pattern":"a^b"})", "'^'"},
      {R"({"type":"string","pattern":"a","maxLength":3})", "maxLength"},
      {R"({"type":"strin"})", "unknown type 'strin'"},
      {R"({"type":"integer","minimum":5,"maximum":4})", "no integer"},
      {R"({"type":"string","maxLength":100000})", "maxLength"},
      {R"(false)", "false"},
      {R"({"type":"object","properties":{"a":{"not":{}}}})", "/properties/a"},
  };
  for (const Case& c : cases) {
    const Status status = compile_error(c.schema);
    EXPECT_FALSE(status.is_ok()) << c.schema;
    EXPECT_NE(status.message().find(c.mentions), std::string::npos)
        << c.schema << " -> " << status.message();
  }
}

TEST(SchemaCompiler, HugeSchemasAreRefused) {
  CompileOptions options;
  options.limits.max_states = 2000;
  auto grammar = compile_json_schema(
      nlohmann::ordered_json::parse(R"({"type":"string","minLength":900,"maxLength":1000})"),
      options);
  ASSERT_FALSE(grammar.is_ok());
  EXPECT_EQ(grammar.status().code(), StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace llamaserve::grammar
