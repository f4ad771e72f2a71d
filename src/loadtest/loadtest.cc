#include "loadtest/loadtest.h"

#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <random>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/progress.h"
#include "loadtest/plot.h"
#include "loadtest/report.h"
#include "loadtest/runner.h"
#include "loadtest/workload.h"

namespace llamaserve::loadtest {
namespace {

constexpr double kProbeTimeoutS = 30;

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

void note(const std::string& text) { fmt::print(stderr, "loadtest: {}\n", text); }

// The first model GET /v1/models lists; "" when the server does not answer it.
std::string probe_model(Runner& runner) {
  const RequestRecord r = runner.call("GET", "/v1/models", "", kProbeTimeoutS);
  if (r.outcome != Outcome::kOk) {
    note(fmt::format("GET /v1/models: {} {}; requests name no model",
                     outcome_key(r.outcome, r.http_status), r.error.substr(0, 200)));
    return "";
  }
  const nlohmann::json json = nlohmann::json::parse(r.body, nullptr, false);
  if (json.is_object() && json.contains("data") && json["data"].is_array() &&
      !json["data"].empty() && json["data"][0].is_object() && json["data"][0].contains("id") &&
      json["data"][0]["id"].is_string()) {
    return json["data"][0]["id"].get<std::string>();
  }
  note("GET /v1/models listed no model; requests name no model");
  return "";
}

// Distinct token ids of the generator's words, from the server's POST /tokenize; empty when
// the server has none.
std::vector<int32_t> probe_token_pool(Runner& runner, const std::string& model) {
  std::string text;
  for (const std::string& word : RequestGenerator::words()) text += " " + word;
  nlohmann::json body = {{"content", text}, {"add_special", false}};
  if (!model.empty()) body["model"] = model;
  const RequestRecord r = runner.call("POST", "/tokenize", body.dump(), kProbeTimeoutS);
  if (r.outcome != Outcome::kOk) {
    note(fmt::format("POST /tokenize: {} {}", outcome_key(r.outcome, r.http_status),
                     r.error.substr(0, 200)));
    return {};
  }
  const nlohmann::json json = nlohmann::json::parse(r.body, nullptr, false);
  std::set<int32_t> ids;
  if (json.is_object() && json.contains("tokens") && json["tokens"].is_array()) {
    for (const nlohmann::json& id : json["tokens"]) {
      if (id.is_number_integer()) ids.insert(id.get<int32_t>());
    }
  }
  return {ids.begin(), ids.end()};
}

// A bar redrawn in place on a terminal, and one line per finished step (not with "none").
class StepDisplay {
 public:
  StepDisplay(ProgressStyle style, const StepLimits& limits, std::string label)
      : style_(style), limits_(limits), label_(std::move(label)) {}

  void update(const StepCounters& c) {
    if (style_ != ProgressStyle::kBar) return;
    double fraction = 0;
    if (limits_.requests > 0) {
      fraction = static_cast<double>(c.finished) / static_cast<double>(limits_.requests);
    }
    if (limits_.duration_s > 0) fraction = std::max(fraction, c.elapsed_s / limits_.duration_s);
    fraction = std::min(fraction, 1.0);
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(fraction * kWidth);
    fmt::print(stderr,
               "\r{} [{}{}] {:3.0f}% {:.1f} s  {} ok  {} failed  {} in flight  {:.0f} tok/s\x1b[K",
               label_, std::string(filled, '#'), std::string(kWidth - filled, '.'), 100 * fraction,
               c.elapsed_s, c.finished - c.failed, c.failed, c.started - c.finished,
               c.elapsed_s > 0 ? c.output_tokens / c.elapsed_s : 0.0);
    std::fflush(stderr);
  }

  void done(const StepStats& stats) {
    if (style_ == ProgressStyle::kSilent) return;
    if (style_ == ProgressStyle::kBar) fmt::print(stderr, "\r\x1b[K");
    fmt::print(stderr, "loadtest: {}\n", step_line(stats));
    std::fflush(stderr);
  }

 private:
  ProgressStyle style_;
  StepLimits limits_;
  std::string label_;
};

Result<ProgressStyle> display_style(const std::string& name) {
  LS_ASSIGN_OR_RETURN(ProgressStyle style, parse_progress_style(name));
  if (style == ProgressStyle::kAuto) {
    style = isatty(STDERR_FILENO) ? ProgressStyle::kBar : ProgressStyle::kLines;
  }
  return style;
}

}  // namespace

Result<RunOutcome> run_loadtest(const LoadtestConfig& config) {
  LS_ASSIGN_OR_RETURN(const ProgressStyle style, display_style(config.progress));
  std::error_code made;
  std::filesystem::create_directories(config.out_dir, made);
  if (made) {
    return make_error(StatusCode::kIo, "cannot create {}: {}", config.out_dir, made.message());
  }
  LS_ASSIGN_OR_RETURN(std::unique_ptr<Runner> runner, Runner::create(config));

  RunReport report;
  report.config = &config;
  report.date_utc = utc_now();
  report.model = config.model.empty() ? probe_model(*runner) : config.model;
  std::vector<int32_t> token_pool;
  if (!config.prompts_file.empty()) {
    report.prompt_format = "jsonl";
  } else if (config.prompt_format != PromptFormat::kText &&
             config.endpoint == Endpoint::kCompletions) {
    token_pool = probe_token_pool(*runner, report.model);
    if (token_pool.empty() && config.prompt_format == PromptFormat::kTokens) {
      return Status(StatusCode::kUnavailable,
                    "--prompt-format tokens: the server's POST /tokenize gave no token ids");
    }
    if (token_pool.empty()) note("prompts are text of words (about one token a word)");
    report.prompt_format = token_pool.empty() ? "text" : "tokens";
  } else {
    report.prompt_format = "text";
  }
  LS_ASSIGN_OR_RETURN(RequestGenerator generator,
                      RequestGenerator::create(config, std::move(token_pool), report.model,
                                               std::random_device{}()));
  int64_t next_index = 0;
  const RequestSource next = [&] { return generator.make(next_index++); };

  RunOutcome outcome;
  if (config.warmup_requests > 0) {
    const int32_t streams = static_cast<int32_t>(std::min<int64_t>(
        config.warmup_requests,
        config.concurrencies.empty() ? 1 : std::max<int64_t>(1, config.concurrencies.front())));
    StepLimits limits;
    limits.requests = config.warmup_requests;
    const StepResult warmup = runner->run_closed(streams, limits, next, {});
    report.warmup_requests = static_cast<int64_t>(warmup.records.size());
    for (const RequestRecord& r : warmup.records) {
      if (r.outcome != Outcome::kOk) ++report.warmup_failed;
    }
    if (report.warmup_failed > 0) {
      note(fmt::format(
          "{} of {} warm-up requests failed (first: {} {})", report.warmup_failed,
          report.warmup_requests,
          outcome_key(warmup.records.front().outcome, warmup.records.front().http_status),
          warmup.records.front().error.substr(0, 200)));
    }
  }

  const Slo slo{config.slo_ttft_ms, config.slo_itl_ms};
  StepLimits limits;
  limits.requests = config.requests;
  limits.duration_s = config.duration_s;
  const size_t n_steps = std::max(config.concurrencies.size(), config.rates_per_s.size());
  for (size_t i = 0; i < n_steps; ++i) {
    const bool closed = !config.concurrencies.empty();
    const StepLoad load{
        closed, closed ? static_cast<double>(config.concurrencies[i]) : config.rates_per_s[i]};
    StepDisplay display(style, limits,
                        fmt::format("step {}/{} {}", i + 1, n_steps, load_label(load)));
    const ProgressCallback progress = [&](const StepCounters& c) { display.update(c); };
    const StepResult result =
        closed ? runner->run_closed(config.concurrencies[i], limits, next, progress)
               : runner->run_open(config.rates_per_s[i], config.seed + i, limits, next, progress);
    StepStats stats = compute_stats(result, slo);
    display.done(stats);
    outcome.ok += stats.ok;
    outcome.failed += stats.failed;
    report.steps.push_back(std::move(stats));
  }

  const std::filesystem::path dir(config.out_dir);
  const std::string json_path = (dir / "report.json").string();
  const std::string md_path = (dir / "report.md").string();
  const std::string gp_path = (dir / "report.gp").string();
  const std::string svg_path = (dir / "report.svg").string();
  const std::string png_path = (dir / "report.png").string();
  LS_RETURN_IF_ERROR(write_text_file(json_path, report_json(report).dump(2) + "\n"));
  const std::string markdown = report_markdown(report);
  LS_RETURN_IF_ERROR(write_text_file(md_path, markdown));
  LS_RETURN_IF_ERROR(write_text_file(gp_path, report_gnuplot(report, svg_path, png_path)));
  fmt::print("{}\n", markdown);
  fmt::print("wrote {} and {}\n", json_path, md_path);
  if (Status drawn = run_gnuplot(config.gnuplot, gp_path); drawn.is_ok()) {
    fmt::print("wrote {} and {}\n", svg_path, png_path);
  } else {
    note(
        fmt::format("the picture was not drawn ({}); {} draws it: install gnuplot (Debian: "
                    "gnuplot-nox) and run gnuplot on it",
                    drawn.message(), gp_path));
  }
  return outcome;
}

}  // namespace llamaserve::loadtest
