// Progress output in the two non-interactive styles, and concurrent updates.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "core/progress.h"

namespace llamaserve {
namespace {

std::string contents(FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string text;
  char buf[256];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  return text;
}

size_t count_lines(const std::string& text) {
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}

TEST(ProgressTest, LinesStylePrintsTenthsAndADoneLine) {
  FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Progress p("convert", 1000, ProgressUnit::kCount, ProgressStyle::kLines, f);
    for (int i = 0; i < 100; ++i) p.add(10, "tensor");
    EXPECT_EQ(p.done_units(), 1000u);
    p.finish();
    p.finish();  // once only
  }
  const std::string text = contents(f);
  std::fclose(f);
  // 10%, 20%, ... 90%, then done.
  EXPECT_EQ(count_lines(text), 10u) << text;
  EXPECT_NE(text.find("convert: 10% (100/1000"), std::string::npos) << text;
  EXPECT_NE(text.find("convert: 90%"), std::string::npos);
  EXPECT_NE(text.find("tensor"), std::string::npos);
  EXPECT_NE(text.find("convert: done, 1000 in"), std::string::npos);
  EXPECT_EQ(text.find('\r'), std::string::npos);  // no terminal control in logs
}

TEST(ProgressTest, BigStepsPrintOneLineAndBytesAreHumanReadable) {
  FILE* f = std::tmpfile();
  {
    Progress p("quantize", 4ull << 30, ProgressUnit::kBytes, ProgressStyle::kLines, f);
    p.add(3ull << 30);  // 75%: one line, not seven
    p.finish();
  }
  const std::string text = contents(f);
  std::fclose(f);
  EXPECT_EQ(count_lines(text), 2u) << text;
  EXPECT_NE(text.find("75% (3.00 GiB/4.00 GiB"), std::string::npos) << text;
  EXPECT_EQ(Progress::format_amount(1536, ProgressUnit::kBytes), "1.5 KiB");
  EXPECT_EQ(Progress::format_amount(12, ProgressUnit::kBytes), "12 B");
}

TEST(ProgressTest, FailedJobsDoNotClaimDoneAndSilentPrintsNothing) {
  FILE* f = std::tmpfile();
  {
    Progress p("synth", 100, ProgressUnit::kCount, ProgressStyle::kLines, f);
    p.add(5);
  }  // no finish(): the job failed
  {
    Progress quiet("synth", 100, ProgressUnit::kCount, ProgressStyle::kSilent, f);
    quiet.add(100);
    quiet.finish();
  }
  const std::string text = contents(f);
  std::fclose(f);
  EXPECT_EQ(text, "");
}

TEST(ProgressTest, BarRedrawsInPlace) {
  FILE* f = std::tmpfile();
  {
    Progress p("load", 10, ProgressUnit::kCount, ProgressStyle::kBar, f);
    p.add(5);
    p.finish();
  }
  const std::string text = contents(f);
  std::fclose(f);
  EXPECT_NE(text.find("\rload ["), std::string::npos) << text;
  EXPECT_NE(text.find("50%"), std::string::npos) << text;
  EXPECT_NE(text.find("done"), std::string::npos);
  EXPECT_EQ(text.back(), '\n');
}

TEST(ProgressTest, ConcurrentAddsAreCounted) {
  FILE* f = std::tmpfile();
  Progress p("threads", 4 * 10000, ProgressUnit::kCount, ProgressStyle::kLines, f);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&p] {
      for (int i = 0; i < 10000; ++i) p.add(1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(p.done_units(), 40000u);
  p.finish();
  const std::string text = contents(f);
  std::fclose(f);
  EXPECT_EQ(count_lines(text), 10u) << text;
}

TEST(ProgressTest, ParsesStyleNames) {
  EXPECT_EQ(*parse_progress_style("lines"), ProgressStyle::kLines);
  EXPECT_EQ(*parse_progress_style("none"), ProgressStyle::kSilent);
  EXPECT_FALSE(parse_progress_style("fancy").is_ok());
}

}  // namespace
}  // namespace llamaserve
