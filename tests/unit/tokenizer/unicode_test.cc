#include "tokenizer/unicode.h"

#include <gtest/gtest.h>

namespace llamaserve::unicode {
namespace {

TEST(Unicode, Categories) {
  EXPECT_TRUE(is_letter('a'));
  EXPECT_TRUE(is_letter(0x00E9));   // é
  EXPECT_TRUE(is_letter(0x4E2D));   // 中
  EXPECT_TRUE(is_letter(0xAC00));   // 가
  EXPECT_TRUE(is_letter(0x017F));   // ſ
  EXPECT_FALSE(is_letter(0x0301));  // combining acute: a mark, not a letter
  EXPECT_EQ(codepoint_info(0x0301).category, Category::kMark);
  EXPECT_TRUE(is_number('7'));
  EXPECT_TRUE(is_number(0x0663));  // Arabic-Indic three
  EXPECT_TRUE(is_number(0x00BD));  // ½ (No)
  EXPECT_TRUE(is_number(0x216B));  // Ⅻ (Nl)
  EXPECT_FALSE(is_number('a'));
  EXPECT_EQ(codepoint_info('!').category, Category::kPunctuation);
  EXPECT_EQ(codepoint_info('+').category, Category::kSymbol);
  EXPECT_EQ(codepoint_info(0x1F999).category, Category::kSymbol);  // 🦙
  EXPECT_EQ(codepoint_info(0xE000).category, Category::kOther);    // private use
  EXPECT_EQ(codepoint_info(0x10FFFF).category, Category::kOther);
}

TEST(Unicode, WhiteSpaceProperty) {
  for (uint32_t cp : {0x09u, 0x0Au, 0x0Bu, 0x0Cu, 0x0Du, 0x20u, 0x85u, 0xA0u, 0x1680u, 0x2000u,
                      0x200Au, 0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u}) {
    EXPECT_TRUE(is_whitespace(cp)) << std::hex << cp;
  }
  for (uint32_t cp : {0x1Cu, 0x1Fu, 0x200Bu, 0x08u, 0x41u, 0xFEFFu}) {
    EXPECT_FALSE(is_whitespace(cp)) << std::hex << cp;
  }
  EXPECT_EQ(codepoint_info(0x3000).category, Category::kSeparator);
}

TEST(Unicode, ScanUtf8) {
  const auto scan = [](std::string_view s) { return scan_utf8(s, 0); };
  EXPECT_EQ(scan("a").status, Utf8Status::kComplete);
  const Utf8Step euro = scan("\xE2\x82\xAC");
  EXPECT_EQ(euro.status, Utf8Status::kComplete);
  EXPECT_EQ(euro.length, 3u);
  EXPECT_EQ(euro.cp, 0x20ACu);
  EXPECT_EQ(scan("\xF0\x9F\xA6\x99").cp, 0x1F999u);
  EXPECT_EQ(scan("\xF0\x9F\xA6").status, Utf8Status::kIncomplete);
  EXPECT_EQ(scan("\xE2").status, Utf8Status::kIncomplete);
  // Ill-formed: stray continuation, C0/C1, F5+, overlong, surrogate, past U+10FFFF, and a lead
  // byte followed by a non-continuation.
  for (std::string_view bad : {"\x80", "\xC0\x80", "\xC1\xBF", "\xF5\x80\x80\x80", "\xE0\x80\x80",
                               "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xF0\x80\x80\x80"}) {
    EXPECT_EQ(scan(bad).status, Utf8Status::kInvalid) << testing::PrintToString(bad);
    EXPECT_EQ(scan(bad).length, 1u);
  }
  const Utf8Step cut = scan(
      "\xE2\x82"
      "a");
  EXPECT_EQ(cut.status, Utf8Status::kInvalid);
  EXPECT_EQ(cut.length, 2u);  // the maximal subpart E2 82 becomes one U+FFFD
}

TEST(Unicode, AppendAndSanitize) {
  std::string out;
  for (uint32_t cp : {0x41u, 0xE9u, 0x20ACu, 0x1F999u}) append_utf8(out, cp);
  EXPECT_EQ(out, "A\xC3\xA9\xE2\x82\xAC\xF0\x9F\xA6\x99");
  EXPECT_EQ(sanitize_utf8(out), out);
  EXPECT_EQ(sanitize_utf8("a\xFF"
                          "b"),
            "a\uFFFD"
            "b");
  EXPECT_EQ(sanitize_utf8("a\xE2\x82"
                          "b"),
            "a\uFFFD"
            "b");
  EXPECT_EQ(sanitize_utf8("\xF0\x9F\xA6"), "\uFFFD");
  EXPECT_EQ(sanitize_utf8("\xC0\xAF"), "\uFFFD\uFFFD");
}

}  // namespace
}  // namespace llamaserve::unicode
