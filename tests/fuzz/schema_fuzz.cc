// libFuzzer target for structured output: JSON Schema text -> compile -> drive the matcher.
// Input layout:
//   schema JSON text, a NUL byte, then bytes fed to the matcher (no NUL: a schema only).
// Besides "never crash" (ASan/UBSan), it checks on every input that compiles:
//   - a rejected byte leaves the matcher dead, and it stays dead;
//   - at every few bytes, the token mask over a small vocabulary (JSON punctuation, digits,
//     letters, quotes, escapes, UTF-8 pieces, whitespace runs and multi-byte tokens) equals a
//     brute-force check of each token, and the end token is allowed exactly when the document
//     is complete (or when nothing else is);
//   - compile errors are kUnsupported, kInvalidArgument or kOutOfRange with a message.
// A violated property aborts, which libFuzzer reports as a crash with the input saved.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/matcher.h"
#include "grammar/schema_compiler.h"
#include "grammar/token_vocabulary.h"

namespace {

using namespace llamaserve;
using namespace llamaserve::grammar;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "schema_fuzz: property violated: %s\n", what);
    std::abort();
  }
}

const TokenVocabulary& vocabulary() {
  static const TokenVocabulary vocab = [] {
    std::vector<std::string> pieces = {
        "{",    "}",    "[",   "]",    ":",     ",",    "\"",   "\\",       "{\"",
        "\":",  "\": ", "\",", "\"}",  "}]",    "0",    "1",    "9",        "12",
        "-",    ".",    "e",   "E",    "+",     "-1",   "3.5",  "true",     "false",
        "null", "a",    "b",   "z",    "A",     "Z",    "_",    "ab",       "abc",
        "name", "age",  "red", "\\n",  "\\\"",  "\\u",  "00",   "e9",       " ",
        "  ",   "\n",   "\t",  "\r\n", "    ",  "\xC3", "\xA9", "\xC3\xA9", "\xE2\x82\xAC",
        "\xE2", "\x82", "x\"", "\"a",  "2024-", "-01",  "T",    "Z\"",      "<end>"};
    const auto end_token = static_cast<int32_t>(pieces.size() - 1);
    return TokenVocabulary::from_pieces(std::move(pieces), {end_token});
  }();
  return vocab;
}

void check_mask(Matcher& matcher) {
  const TokenVocabulary& vocab = vocabulary();
  TokenMask mask;
  matcher.allowed_tokens(vocab, mask);
  size_t n_allowed = 0;
  for (int32_t id = 0; id < vocab.n_vocab(); ++id) {
    if (vocab.is_end_token(id)) continue;
    Matcher copy = matcher;
    const bool want = copy.advance(vocab.token_bytes(id));
    check(mask.allowed(id) == want, "mask equals the brute-force check");
    n_allowed += want;
  }
  const bool end_allowed = mask.allowed(vocab.end_tokens()[0]);
  check(end_allowed == (matcher.is_complete() || (n_allowed == 0 && !matcher.is_dead())),
        "end token allowed exactly when complete");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find('\0');
  const std::string_view schema_text = input.substr(0, split);
  const std::string_view document =
      split == std::string_view::npos ? std::string_view() : input.substr(split + 1);
  const auto schema = nlohmann::ordered_json::parse(schema_text, nullptr, false);
  if (schema.is_discarded()) return 0;

  CompileOptions options;
  options.max_count = 64;  // keep each run small
  options.limits.max_states = 20'000;
  options.limits.max_closure_entries = 200'000;
  auto grammar = compile_json_schema(schema, options);
  if (!grammar) {
    const StatusCode code = grammar.status().code();
    check(code == StatusCode::kUnsupported || code == StatusCode::kInvalidArgument ||
              code == StatusCode::kOutOfRange,
          "compile errors are unsupported, invalid or too large");
    check(!grammar.status().message().empty(), "compile errors say why");
    return 0;
  }
  Matcher matcher(*grammar);
  check_mask(matcher);
  for (size_t i = 0; i < document.size() && i < 512; ++i) {
    const bool alive = matcher.advance(document.substr(i, 1));
    check(alive == !matcher.is_dead(), "advance reports death");
    if (!alive) {
      check(!matcher.advance("a") && matcher.is_dead(), "a dead matcher stays dead");
      return 0;
    }
    if (i % 8 == 7) check_mask(matcher);
  }
  check_mask(matcher);
  return 0;
}
