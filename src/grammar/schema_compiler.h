// JSON Schema (the subset OpenAI's structured outputs use, and a little more) → Grammar.
//
// What a schema compiles to (docs/api.md lists it for users):
//   - type: object, array, string, number, integer, boolean, null, or a list of them;
//     {} / true: any JSON value;
//   - object: "properties" in schema order, every "required" one present, optional ones
//     present or absent. Only the listed properties are generated, whatever
//     "additionalProperties" says (extra properties are never required, so the output is valid
//     either way). An object schema without "properties" is a free map: any keys, values of the
//     "additionalProperties" schema (any value when absent or true; `{}` when false);
//   - array: "items" (any value when absent), "minItems", "maxItems";
//   - string: "minLength"/"maxLength" (code points, escapes count as one), "pattern" (regex.h),
//     "format" date, time, date-time, uuid, ipv4 as patterns (other formats are annotations and
//     are not enforced);
//   - integer: "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum" exactly; unbounded
//     sides are capped at `max_integer_digits` digits;
//   - number: free numbers with at most max_integer_digits digits before and
//     max_fraction_digits after the point and a 1-3 digit exponent; with any bound, only
//     integers within the bounds are generated (always valid, never fractional);
//   - enum, const: the values, written as compact JSON;
//   - anyOf (and oneOf, taken as anyOf: exclusivity is not enforced), allOf of one schema;
//   - $ref to "#", "#/$defs/...", "#/definitions/..." or any JSON pointer in the document,
//     recursive ones included (nesting is bounded by the matcher's stack depth).
// Annotations (title, description, default, examples, $schema, $id, $comment, deprecated,
// readOnly, writeOnly, x-...) are ignored. Any other keyword is an error naming it and where
// it is ("unsupported schema keyword 'uniqueItems' at /properties/tags").
//
// Whitespace: up to `max_whitespace` JSON whitespace bytes wherever JSON allows whitespace
// inside objects and arrays, none before or after the document.
#pragma once

#include <memory>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "grammar/grammar.h"

namespace llamaserve::grammar {

struct CompileOptions {
  int32_t max_whitespace = 4;
  int32_t max_integer_digits = 15;
  int32_t max_fraction_digits = 15;
  // Counted repetitions (maxLength, maxItems, minItems, ...) above this are refused: each
  // count is a copy of states.
  int32_t max_count = 1024;
  GrammarLimits limits;
};

// Properties are generated in the order of the schema's text, which an ordered_json keeps.
Result<Grammar> compile_json_schema(const nlohmann::ordered_json& schema,
                                    const CompileOptions& options = {});
// Any JSON object (OpenAI's {"type": "json_object"}).
Result<Grammar> compile_json_object(const CompileOptions& options = {});

}  // namespace llamaserve::grammar
