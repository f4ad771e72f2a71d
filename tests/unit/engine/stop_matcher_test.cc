#include "engine/stop_matcher.h"

#include <random>

#include <gtest/gtest.h>

namespace llamaserve {
namespace {

struct Streamed {
  std::string text;
  bool stopped = false;
};

Streamed stream(StopStringMatcher& matcher, const std::vector<std::string>& pieces) {
  Streamed out;
  for (const std::string& piece : pieces) {
    StopStringMatcher::Output o = matcher.push(piece);
    out.text += o.text;
    if (o.stopped) {
      out.stopped = true;
      return out;
    }
  }
  out.text += matcher.flush();
  return out;
}

TEST(StopStringMatcherTest, CatchesAStopStringSplitAcrossPieces) {
  StopStringMatcher matcher({"STOP"});
  StopStringMatcher::Output o = matcher.push("Hel");
  EXPECT_EQ(o.text, "Hel");
  o = matcher.push("lo ST");
  EXPECT_EQ(o.text, "lo ");  // "ST" might start STOP: held back
  EXPECT_FALSE(o.stopped);
  o = matcher.push("O");
  EXPECT_EQ(o.text, "");
  o = matcher.push("P world");
  EXPECT_TRUE(o.stopped);
  EXPECT_EQ(o.text, "");
  EXPECT_EQ(matcher.flush(), "");
  EXPECT_TRUE(matcher.push("more").stopped);
}

TEST(StopStringMatcherTest, ReleasesHeldTextWhenItIsNotAStop) {
  StopStringMatcher matcher({"abc"});
  EXPECT_EQ(matcher.push("xa").text, "x");
  EXPECT_EQ(matcher.push("b").text, "");
  EXPECT_EQ(matcher.push("d").text, "abd");
  EXPECT_EQ(matcher.push("ab").text, "");
  EXPECT_EQ(matcher.flush(), "ab");
}

TEST(StopStringMatcherTest, FirstCompletedStopWinsWhateverTheSplit) {
  for (const auto& pieces :
       std::vector<std::vector<std::string>>{{"hel", "lo wor", "ld"}, {"hello world"}}) {
    StopStringMatcher matcher({"o world", "lo w", "\n\n"});
    Streamed out = stream(matcher, pieces);
    EXPECT_TRUE(out.stopped);
    EXPECT_EQ(out.text, "hel");
  }
  StopStringMatcher matcher({"abcd", "bc"});
  Streamed out = stream(matcher, {"abcd"});
  EXPECT_EQ(out.text, "a");  // "bc" is complete before "abcd"
}

TEST(StopStringMatcherTest, OverlappingPrefixes) {
  StopStringMatcher matcher({"aab"});
  Streamed out = stream(matcher, {"a", "a", "a", "b", "c"});
  EXPECT_TRUE(out.stopped);
  EXPECT_EQ(out.text, "a");
}

TEST(StopStringMatcherTest, MultiByteStopString) {
  StopStringMatcher matcher({"\xC3\xA9t\xC3\xA9"});  // "été"
  Streamed out = stream(matcher, {"un \xC3\xA9", "t", "\xC3\xA9 chaud"});
  EXPECT_TRUE(out.stopped);
  EXPECT_EQ(out.text, "un ");
}

TEST(StopStringMatcherTest, NoStopsPassesEverythingThrough) {
  StopStringMatcher matcher({"", ""});
  EXPECT_FALSE(matcher.active());
  EXPECT_EQ(matcher.push("abc").text, "abc");
  EXPECT_EQ(matcher.flush(), "");
}

// Random texts over a tiny alphabet, random splits: the streamed text is exactly the text
// before the first stop string, and nothing after it ever comes out.
TEST(StopStringMatcherTest, RandomSplitsMatchTheReference) {
  std::mt19937 rng(3);
  const std::string alphabet = "ab c";
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<std::string> stops;
    for (int s = 0, n = 1 + static_cast<int>(rng() % 3); s < n; ++s) {
      std::string stop;
      for (int i = 0, len = 1 + static_cast<int>(rng() % 4); i < len; ++i)
        stop += alphabet[rng() % 4];
      stops.push_back(stop);
    }
    std::string text;
    for (int i = 0, len = static_cast<int>(rng() % 30); i < len; ++i) text += alphabet[rng() % 4];

    // Reference: the first end position at which some stop string is complete; the cut is
    // at the start of the longest one ending there.
    size_t first = std::string::npos;
    for (size_t end = 1; end <= text.size() && first == std::string::npos; ++end) {
      for (const std::string& stop : stops) {
        if (stop.size() <= end && text.compare(end - stop.size(), stop.size(), stop) == 0) {
          first = std::min(first, end - stop.size());
        }
      }
    }
    const std::string want = first == std::string::npos ? text : text.substr(0, first);

    std::vector<std::string> pieces;
    for (size_t i = 0; i < text.size();) {
      size_t len = std::min(text.size() - i, static_cast<size_t>(rng() % 5));
      pieces.push_back(text.substr(i, len));
      i += len;
    }
    StopStringMatcher matcher(stops);
    Streamed out = stream(matcher, pieces);
    ASSERT_EQ(out.stopped, first != std::string::npos) << text;
    ASSERT_EQ(out.text, want) << text;
  }
}

}  // namespace
}  // namespace llamaserve
