#include "server/utf8.h"

#include <string>

#include <gtest/gtest.h>

namespace llamaserve::server {
namespace {

TEST(Utf8, AcceptsWellFormedText) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("plain ascii"));
  EXPECT_TRUE(is_valid_utf8("caf\xC3\xA9"));       // U+00E9
  EXPECT_TRUE(is_valid_utf8("\xE2\x82\xAC"));      // U+20AC
  EXPECT_TRUE(is_valid_utf8("\xF0\x9F\x98\x80"));  // U+1F600
  EXPECT_TRUE(is_valid_utf8("\xF4\x8F\xBF\xBF"));  // U+10FFFF, the last code point
  EXPECT_TRUE(is_valid_utf8(std::string("nul\0inside", 10)));
}

TEST(Utf8, RejectsMalformedSequencesAtTheirOffset) {
  EXPECT_EQ(find_invalid_utf8("ab\xFF"), 2u);            // never a lead byte
  EXPECT_EQ(find_invalid_utf8("\x80"), 0u);              // lone continuation
  EXPECT_EQ(find_invalid_utf8("x\xC3"), 1u);             // truncated 2-byte
  EXPECT_EQ(find_invalid_utf8("\xE2\x82"), 0u);          // truncated 3-byte
  EXPECT_EQ(find_invalid_utf8("\xC0\xAF"), 0u);          // overlong '/'
  EXPECT_EQ(find_invalid_utf8("\xE0\x80\xAF"), 0u);      // overlong 3-byte
  EXPECT_EQ(find_invalid_utf8("\xF0\x80\x80\xAF"), 0u);  // overlong 4-byte
  EXPECT_EQ(find_invalid_utf8("ok\xED\xA0\x80"), 2u);    // UTF-16 surrogate U+D800
  EXPECT_EQ(find_invalid_utf8("\xF4\x90\x80\x80"), 0u);  // U+110000
  EXPECT_EQ(find_invalid_utf8("\xE2\x28\xA1"), 0u);      // bad continuation
  EXPECT_EQ(find_invalid_utf8("\xF5\x80\x80\x80"), 0u);
}

}  // namespace
}  // namespace llamaserve::server
