#include "core/log.h"

#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <nlohmann/json.hpp>

namespace llamaserve {
namespace {

// Routes the program's logger into a string for one test.
class LogCapture : public ::testing::Test {
 protected:
  void SetUp() override {
    spdlog::drop("llamaserve");
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    spdlog::register_logger(std::make_shared<spdlog::logger>("llamaserve", sink));
  }
  void TearDown() override {
    spdlog::drop("llamaserve");
    setup_logging(LogSettings{});
  }
  std::ostringstream out_;
};

TEST_F(LogCapture, TextLinesQuoteOnlyWhatNeedsIt) {
  setup_logging({"info", LogFormat::kText});
  log_event(spdlog::level::info, "request",
            {{"id", std::string_view("req-1")},
             {"status", int64_t{200}},
             {"ttft_ms", 12.345},
             {"error", std::string_view("bad \"input\"")}});
  const std::string line = out_.str();
  EXPECT_NE(line.find(" info request id=req-1 status=200 ttft_ms=12.3 error=\"bad \\\"input\\\"\""),
            std::string::npos)
      << line;
}

TEST_F(LogCapture, JsonLinesAreObjectsWithTypedFields) {
  setup_logging({"info", LogFormat::kJson});
  spdlog::info("plain \"message\"\twith a tab and \xff byte");
  log_event(spdlog::level::warn, "request",
            {{"id", std::string_view("req-1")}, {"status", int64_t{429}}, {"total_ms", 0.06}});
  std::istringstream lines(out_.str());
  std::string first;
  std::string second;
  ASSERT_TRUE(std::getline(lines, first));
  ASSERT_TRUE(std::getline(lines, second));
  const auto plain = nlohmann::json::parse(first);
  EXPECT_EQ(plain["level"], "info");
  EXPECT_EQ(plain["msg"], "plain \"message\"\twith a tab and \xef\xbf\xbd byte");
  EXPECT_EQ(plain["time"].get<std::string>().size(), 24u);  // 2026-01-02T03:04:05.678Z
  const auto event = nlohmann::json::parse(second);
  EXPECT_EQ(event["level"], "warning");
  EXPECT_EQ(event["msg"], "request");
  EXPECT_EQ(event["id"], "req-1");
  EXPECT_EQ(event["status"], 429);
  EXPECT_DOUBLE_EQ(event["total_ms"].get<double>(), 0.1);
}

TEST_F(LogCapture, LevelFiltersEvents) {
  setup_logging({"warn", LogFormat::kJson});
  log_event(spdlog::level::info, "request", {{"id", std::string_view("hidden")}});
  EXPECT_EQ(out_.str(), "");
}

TEST(ParseLogFormat, Names) {
  EXPECT_EQ(parse_log_format("json").value(), LogFormat::kJson);
  EXPECT_EQ(parse_log_format("text").value(), LogFormat::kText);
  EXPECT_FALSE(parse_log_format("xml").is_ok());
}

}  // namespace
}  // namespace llamaserve
