// Progress as model loading drives it: absolute byte counts (update) and the log style used
// when stderr is not a terminal.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "core/progress.h"

namespace llamaserve {
namespace {

// Routes the default logger into a string for the test's lifetime.
class CapturedLog {
 public:
  CapturedLog() : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(text_);
    sink->set_pattern("%l %v");
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
    spdlog::set_level(spdlog::level::info);
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  std::string text() const { return text_.str(); }
  size_t lines() const {
    const std::string t = text();
    return static_cast<size_t>(std::count(t.begin(), t.end(), '\n'));
  }

 private:
  std::ostringstream text_;
  std::shared_ptr<spdlog::logger> previous_;
};

TEST(LoadProgressTest, QuickLoadsLogOneLine) {
  CapturedLog log;
  {
    Progress p("loading model.gguf", 1000, ProgressUnit::kBytes, ProgressStyle::kLog);
    for (uint64_t done = 100; done <= 1000; done += 100) p.update(done, "blk.0.attn_q.weight");
    EXPECT_EQ(p.done_units(), 1000u);
    p.finish();
  }
  EXPECT_EQ(log.lines(), 1u) << log.text();
  EXPECT_NE(log.text().find("info loading model.gguf: done, 1000 B in"), std::string::npos)
      << log.text();
}

TEST(LoadProgressTest, SlowLoadsLogQuartersAfterTheFirstSecond) {
  CapturedLog log;
  {
    Progress p("loading model.gguf", 4000, ProgressUnit::kBytes, ProgressStyle::kLog);
    p.update(1100);  // a quarter within the first second: not logged
    std::this_thread::sleep_for(std::chrono::milliseconds(1050));
    p.update(2600, "blk.7.ffn_up.weight");  // half: logged
    p.update(2700);                         // same quarter: not logged again
    p.update(4000);                         // the end is the final line's
    p.finish();
  }
  EXPECT_EQ(log.lines(), 2u) << log.text();
  EXPECT_NE(log.text().find("loading model.gguf: 65% (2.5 KiB/3.9 KiB"), std::string::npos)
      << log.text();
  EXPECT_NE(log.text().find("blk.7.ffn_up.weight"), std::string::npos);
  EXPECT_NE(log.text().find("done, 3.9 KiB"), std::string::npos) << log.text();
  EXPECT_EQ(log.text().find('\r'), std::string::npos);
}

TEST(LoadProgressTest, UpdateNeverGoesBackAndClampsAtTheTotal) {
  FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Progress p("loading", 100, ProgressUnit::kCount, ProgressStyle::kLines, f);
    p.update(50);
    p.update(20);
    EXPECT_EQ(p.done_units(), 50u);
    p.add(30);
    EXPECT_EQ(p.done_units(), 80u);
    p.update(500);
    EXPECT_EQ(p.done_units(), 100u);
    p.add(1);
    EXPECT_EQ(p.done_units(), 100u);
  }
  std::fclose(f);
}

TEST(LoadProgressTest, BarRedrawsInPlace) {
  FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Progress p("loading model.gguf", 1 << 20, ProgressUnit::kBytes, ProgressStyle::kBar, f);
    p.update(1 << 19, "token_embd.weight");
    p.update(1 << 20);
    p.finish();
  }
  std::fflush(f);
  std::rewind(f);
  std::string text(4096, '\0');
  text.resize(std::fread(text.data(), 1, text.size(), f));
  std::fclose(f);
  EXPECT_EQ(text.find("\rloading model.gguf ["), 0u) << text;
  EXPECT_NE(text.find("50%"), std::string::npos) << text;
  EXPECT_NE(text.find("token_embd.weight"), std::string::npos) << text;
  EXPECT_NE(text.find("loading model.gguf: done, 1.0 MiB in"), std::string::npos) << text;
  EXPECT_EQ(text.back(), '\n');
}

}  // namespace
}  // namespace llamaserve
