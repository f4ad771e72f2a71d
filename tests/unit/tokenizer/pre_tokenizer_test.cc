// Expected splits were produced by the `tokenizers` package running each model family's
// regex (see tests/py/test_tokenizer_reference.py for the corpus-wide comparison).
#include "tokenizer/pre_tokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace llamaserve {
namespace {

std::vector<std::string> split(PreTokenizerKind kind, std::string_view text) {
  std::vector<std::string_view> pieces;
  pre_tokenize(kind, text, pieces);
  size_t covered = 0;
  for (std::string_view piece : pieces) {
    EXPECT_FALSE(piece.empty());
    EXPECT_EQ(piece.data(), text.data() + covered) << "pieces must tile the text in order";
    covered += piece.size();
  }
  EXPECT_EQ(covered, text.size());
  return {pieces.begin(), pieces.end()};
}

using Pieces = std::vector<std::string>;

TEST(PreTokenizer, Gpt2) {
  const auto k = PreTokenizerKind::kGpt2;
  EXPECT_EQ(split(k, "Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(split(k, "I'M here, we'll see"),
            (Pieces{"I", "'", "M", " here", ",", " we", "'ll", " see"}));
  EXPECT_EQ(split(k, "  two  spaces  "), (Pieces{" ", " two", " ", " spaces", "  "}));
  EXPECT_EQ(split(k, "a\n\n  b\r\n"), (Pieces{"a", "\n\n ", " b", "\r\n"}));
  EXPECT_EQ(split(k, "12345 x 7"), (Pieces{"12345", " x", " 7"}));
  EXPECT_EQ(split(k, "(abc) ...!!\n\nx"), (Pieces{"(", "abc", ")", " ...!!", "\n", "\n", "x"}));
  EXPECT_EQ(split(k, "日本語 テスト"), (Pieces{"日本語", " テスト"}));
  EXPECT_EQ(split(k, "tab\tsep"), (Pieces{"tab", "\t", "sep"}));
  EXPECT_EQ(split(k, "x' 's"), (Pieces{"x", "'", " '", "s"}));
  EXPECT_EQ(split(k, "über café"), (Pieces{"über", " café"}));
  EXPECT_EQ(split(k, "a1b22"), (Pieces{"a", "1", "b", "22"}));
  EXPECT_EQ(split(k, ""), Pieces{});
}

TEST(PreTokenizer, Llama3) {
  const auto k = PreTokenizerKind::kLlama3;
  EXPECT_EQ(split(k, "I'M here, we'll see"),
            (Pieces{"I", "'M", " here", ",", " we", "'ll", " see"}));
  EXPECT_EQ(split(k, "  two  spaces  "), (Pieces{" ", " two", " ", " spaces", "  "}));
  EXPECT_EQ(split(k, "a\n\n  b\r\n"), (Pieces{"a", "\n\n", " ", " b", "\r\n"}));
  EXPECT_EQ(split(k, "12345 x 7"), (Pieces{"123", "45", " x", " ", "7"}));
  EXPECT_EQ(split(k, "(abc) ...!!\n\nx"), (Pieces{"(abc", ")", " ...!!\n\n", "x"}));
  EXPECT_EQ(split(k, "tab\tsep"), (Pieces{"tab", "\tsep"}));
  EXPECT_EQ(split(k, "x' 's"), (Pieces{"x", "'", " '", "s"}));
  EXPECT_EQ(split(k, "a1b22"), (Pieces{"a", "1", "b", "22"}));
  // Case-insensitive contractions include U+017F, which case-folds to 's'.
  EXPECT_EQ(split(k, "that'ſall x'Sam"), (Pieces{"that", "'ſ", "all", " x", "'S", "am"}));
}

TEST(PreTokenizer, Qwen2SplitsEveryDigit) {
  const auto k = PreTokenizerKind::kQwen2;
  EXPECT_EQ(split(k, "12345 x 7"), (Pieces{"1", "2", "3", "4", "5", " x", " ", "7"}));
  EXPECT_EQ(split(k, "(abc) ...!!\n\nx"), (Pieces{"(abc", ")", " ...!!\n\n", "x"}));
}

TEST(PreTokenizer, Smollm) {
  const auto k = PreTokenizerKind::kSmollm;
  EXPECT_EQ(split(k, "I'M here, we'll see"),
            (Pieces{"I", "'", "M", " here", ",", " we", "'ll", " see"}));
  EXPECT_EQ(split(k, "12345 x 7"), (Pieces{"1", "2", "3", "4", "5", " x", " ", "7"}));
  EXPECT_EQ(split(k, "a1b22"), (Pieces{"a", "1", "b", "2", "2"}));
  EXPECT_EQ(split(k, "a\n\n  b\r\n"), (Pieces{"a", "\n\n ", " b", "\r\n"}));
}

TEST(PreTokenizer, WhitespaceIsTheUnicodeProperty) {
  // U+001C..U+001F are not White_Space (Python's isspace() says otherwise); U+0085 and U+3000
  // are.
  EXPECT_EQ(split(PreTokenizerKind::kLlama3,
                  "a\x1c\x1d"
                  "b"),
            (Pieces{"a", "\x1c\x1d", "b"}));
  EXPECT_EQ(split(PreTokenizerKind::kLlama3, "a\u3000\u3000b"), (Pieces{"a", "\u3000", "\u3000b"}));
  EXPECT_EQ(split(PreTokenizerKind::kGpt2, "a\u3000\u3000b"),
            (Pieces{"a", "\u3000", "\u3000", "b"}));
}

TEST(PreTokenizer, InvalidUtf8BytesAreKept) {
  const std::string text = "ab\xff\xfe cd\xc3";
  const Pieces pieces = split(PreTokenizerKind::kLlama3, text);
  EXPECT_EQ(pieces, (Pieces{"ab", "\xff\xfe", " cd", "\xc3"}));
}

TEST(PreTokenizer, NamesMapToKinds) {
  EXPECT_EQ(*pre_tokenizer_from_name("llama-bpe"), PreTokenizerKind::kLlama3);
  EXPECT_EQ(*pre_tokenizer_from_name("llama3"), PreTokenizerKind::kLlama3);
  EXPECT_EQ(*pre_tokenizer_from_name("smollm"), PreTokenizerKind::kSmollm);
  EXPECT_EQ(*pre_tokenizer_from_name("qwen2"), PreTokenizerKind::kQwen2);
  EXPECT_EQ(*pre_tokenizer_from_name("default"), PreTokenizerKind::kGpt2);
  const Result<PreTokenizerKind> unknown = pre_tokenizer_from_name("deepseek-coder");
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(unknown.status().message().find("deepseek-coder"), std::string::npos);
}

TEST(PreTokenizer, LongRunsStayLinear) {
  // 2 MB without a break for the whitespace and newline alternatives, which backtrack.
  std::string text(1 << 20, ' ');
  text += std::string(1 << 20, '\n');
  text += "x";
  std::vector<std::string_view> pieces;
  pre_tokenize(PreTokenizerKind::kLlama3, text, pieces);
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].size(), (2u << 20));
  EXPECT_EQ(pieces[1], "x");
}

}  // namespace
}  // namespace llamaserve
