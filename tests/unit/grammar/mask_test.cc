// Token masks: the trie walk against a brute-force check of every token, on a small made-up
// vocabulary and on the real ones (LLaMA 2 SentencePiece, LLaMA 3 byte-level BPE, SmolLM2),
// for states reached along real documents; and the time one mask takes.
#include <chrono>
#include <filesystem>

#include <gtest/gtest.h>

#include "gguf/gguf.h"
#include "grammar/constraint.h"
#include "grammar_test_support.h"
#include "tokenizer/tokenizer.h"

namespace llamaserve::grammar {
namespace {

using testing::compile;

TokenMask brute_force(const Matcher& matcher, const TokenVocabulary& vocab) {
  TokenMask mask;
  mask.reset(vocab.n_vocab());
  size_t n = 0;
  for (int32_t id = 0; id < vocab.n_vocab(); ++id) {
    const std::string& bytes = vocab.token_bytes(id);
    if (bytes.empty()) continue;
    Matcher copy = matcher;
    if (copy.advance(bytes)) {
      mask.allow(id);
      ++n;
    }
  }
  if (matcher.is_complete() || (n == 0 && !matcher.is_dead())) {
    for (int32_t id : vocab.end_tokens()) mask.allow(id);
  }
  return mask;
}

void expect_same(const TokenMask& got, const TokenMask& want, const TokenVocabulary& vocab,
                 const std::string& where) {
  int shown = 0;
  for (int32_t id = 0; id < vocab.n_vocab() && shown < 5; ++id) {
    if (got.allowed(id) != want.allowed(id)) {
      ADD_FAILURE() << where << ": token " << id << " '" << vocab.token_bytes(id) << "' is "
                    << (got.allowed(id) ? "allowed" : "refused") << " by the trie walk";
      ++shown;
    }
  }
}

TEST(TokenVocabulary, TrieRangesCoverTokens) {
  const auto vocab =
      TokenVocabulary::from_pieces({"a", "ab", "abc", "b", "", "ab", "\"", "END"}, {7});
  EXPECT_EQ(vocab.sorted_tokens().size(), 6u);  // "" and the end token are not in the trie
  const auto& root = vocab.nodes()[0];
  EXPECT_EQ(root.token_end - root.token_begin, 6);
  EXPECT_TRUE(vocab.is_end_token(7));
  EXPECT_FALSE(vocab.is_end_token(0));
}

TEST(TokenMask, SmallVocabulary) {
  const auto vocab =
      TokenVocabulary::from_pieces({"{", "}", "{\"", "\"", "a", "ab", ":", "1", "12",
                                    "\":", "\": ", " ", ",", "x\"}", "<eos>", "é", "\xC3", "\xA9"},
                                   {14});
  const Grammar g = compile(R"({"type":"object","properties":{"ab":{"type":"integer"}},
      "required":["ab"]})");
  Matcher matcher(g);
  TokenMask mask;
  matcher.allowed_tokens(vocab, mask);
  EXPECT_TRUE(mask.allowed(0));    // {
  EXPECT_TRUE(mask.allowed(2));    // {"
  EXPECT_FALSE(mask.allowed(1));   // }
  EXPECT_FALSE(mask.allowed(14));  // not complete yet
  for (const char* step : {"{\"ab", "\":", "12", "}"}) {
    ASSERT_TRUE(matcher.advance(step)) << step;
    matcher.allowed_tokens(vocab, mask);
    expect_same(mask, brute_force(matcher, vocab), vocab, step);
  }
  EXPECT_TRUE(matcher.must_end());
  EXPECT_EQ(mask.count(), 1u);
  EXPECT_TRUE(mask.allowed(14));
}

TEST(TokenMask, AppliesMinusInfinity) {
  TokenMask mask;
  mask.reset(70);
  mask.allow(3);
  mask.allow(65);
  std::vector<float> logits(70, 1.0f);
  mask.apply(logits);
  for (int i = 0; i < 70; ++i) {
    EXPECT_EQ(std::isinf(logits[static_cast<size_t>(i)]), i != 3 && i != 65) << i;
  }
}

Tokenizer load(const std::string& path) {
  auto file = GgufFile::open(path);
  EXPECT_TRUE(file.is_ok()) << path;
  auto tok = Tokenizer::from_gguf(**file);
  EXPECT_TRUE(tok.is_ok()) << path;
  return std::move(tok).value();
}

struct Walk {
  const char* schema;  // nullptr: json_object
  const char* document;
};

// Schemas and documents whose every prefix is a state to check.
const Walk kWalks[] = {
    {nullptr, "{\"name\": \"Zo\xC3\xAB \\\"Z\\\"\", \"tags\": [1, -2.5e3, true, null], \"o\": {}}"},
    {R"({"type":"object","properties":{"city":{"type":"string","maxLength":12},
       "n":{"type":"integer","minimum":-5,"maximum":120},
       "kind":{"enum":["alpha","beta","gamma"]},
       "ids":{"type":"array","items":{"type":"string","pattern":"^[a-f0-9]{4}$"},
              "minItems":1,"maxItems":3},
       "when":{"type":"string","format":"date"},
       "any":{"anyOf":[{"type":"number"},{"type":"boolean"}]}},
       "required":["city","n","kind","ids","when","any"],"additionalProperties":false})",
     R"({"city": "Par\u00eds", "n": 42, "kind": "beta", "ids": ["ab12", "ffff"], "when": "2024-05-01", "any": false})"},
};

class RealVocabulary : public ::testing::TestWithParam<std::string> {};

TEST_P(RealVocabulary, MaskEqualsBruteForce) {
  if (!std::filesystem::exists(GetParam())) GTEST_SKIP() << "missing " << GetParam();
  const Tokenizer tokenizer = load(GetParam());
  const auto vocab = TokenVocabulary::from_tokenizer(tokenizer);
  EXPECT_FALSE(vocab.end_tokens().empty());
  for (const Walk& walk : kWalks) {
    const Grammar g = walk.schema ? compile(walk.schema) : compile_json_object().value();
    Matcher matcher(g);
    const std::string document = walk.document;
    TokenMask mask;
    for (size_t i = 0; i <= document.size(); ++i) {
      // Every few bytes (and at the end), the mask against the brute force.
      if (i % 5 == 0 || i == document.size()) {
        matcher.allowed_tokens(vocab, mask);
        expect_same(mask, brute_force(matcher, vocab), vocab,
                    GetParam() + " after '" + document.substr(0, i) + "'");
        if (::testing::Test::HasFailure()) return;
      }
      if (i < document.size()) {
        ASSERT_TRUE(matcher.advance(document.substr(i, 1))) << i;
      }
    }
    EXPECT_TRUE(matcher.is_complete());
  }
}

// Microseconds per mask (no cache) for a few typical states; printed, and bounded loosely
// so that a pathological slowdown fails.
TEST_P(RealVocabulary, MaskTime) {
  if (!std::filesystem::exists(GetParam())) GTEST_SKIP() << "missing " << GetParam();
  const Tokenizer tokenizer = load(GetParam());
  const auto vocab = TokenVocabulary::from_tokenizer(tokenizer);
  const Grammar g = compile(kWalks[1].schema);
  const struct {
    const char* name;
    const char* prefix;
  } states[] = {
      {"start", ""},
      {"free string", R"({"city": "Par)"},
      {"integer", R"({"city": "Paris", "n": 4)"},
      {"enum", R"({"city": "Paris", "n": 42, "kind": ")"},
      {"pattern", R"({"city": "Paris", "n": 42, "kind": "beta", "ids": ["a)"},
  };
  const Grammar object = compile_json_object().value();
  for (const auto& s : states) {
    Matcher matcher(g);
    ASSERT_TRUE(matcher.advance(s.prefix)) << s.name;
    TokenMask mask;
    constexpr int kRounds = 20;
    const auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < kRounds; ++r) matcher.allowed_tokens(vocab, mask);
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count() /
        kRounds;
    std::printf(
        "%s: %-12s %8.1f us per mask, %zu of %d tokens allowed, %zu of %zu trie nodes "
        "stepped\n",
        std::filesystem::path(GetParam()).filename().c_str(), s.name, us, mask.count(),
        vocab.n_vocab(), matcher.last_nodes_visited(), vocab.nodes().size());
    EXPECT_LT(us, 50'000.0) << s.name;
  }
  Matcher free_text(object);
  ASSERT_TRUE(free_text.advance("{\"k\": \"some text"));
  TokenMask mask;
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < 20; ++r) free_text.allowed_tokens(vocab, mask);
  std::printf(
      "%s: json_object string %8.1f us per mask\n",
      std::filesystem::path(GetParam()).filename().c_str(),
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() /
          20);
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, RealVocabulary,
    ::testing::Values(std::string(LLAMASERVE_FIXTURES_DIR) + "/vocab-llama3-bpe.gguf",
                      std::string(LLAMASERVE_FIXTURES_DIR) + "/vocab-llama2-spm.gguf",
                      std::string(LLAMASERVE_SOURCE_DIR) +
                          "/models/SmolLM2-135M-Instruct.Q4_1.gguf"),
    [](const auto& info) {
      return std::string(info.index == 0 ? "Llama3" : info.index == 1 ? "Llama2" : "SmolLM2");
    });

TEST(ConstraintState, EndsOnlyWhenComplete) {
  const auto vocab = std::make_shared<const TokenVocabulary>(
      TokenVocabulary::from_pieces({"[", "]", "1", ",", "<eos>"}, {4}));
  auto constraint = std::make_shared<const Constraint>(
      compile(R"({"type":"array","items":{"type":"integer"},"maxItems":1})"), vocab);
  ConstraintState state(constraint);
  EXPECT_FALSE(state.allowed_tokens()->allowed(4));
  state.accept(0);
  state.accept(2);
  EXPECT_FALSE(state.allowed_tokens()->allowed(3));  // maxItems 1: no comma
  state.accept(1);
  EXPECT_TRUE(state.is_complete());
  const auto mask = state.allowed_tokens();
  EXPECT_TRUE(mask->allowed(4));
  EXPECT_EQ(mask->count(), 1u);
  state.accept(4);
  EXPECT_EQ(state.allowed_tokens()->count(), 1u);
  // A second sequence in the same state takes the cached mask.
  ConstraintState other(constraint);
  for (int32_t t : {0, 2, 1}) other.accept(t);
  EXPECT_EQ(other.allowed_tokens().get(), mask.get());
  EXPECT_GE(constraint->cache_stats().hits, 1u);
}

}  // namespace
}  // namespace llamaserve::grammar
