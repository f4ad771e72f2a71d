#include "loadtest/report.h"

#include <cmath>
#include <cstdio>

#include <fmt/format.h>

namespace llamaserve::loadtest {
namespace {

nlohmann::json summary_json(const Summary& s) {
  return {{"count", s.count}, {"mean", s.mean}, {"p50", s.p50},
          {"p90", s.p90},     {"p99", s.p99},   {"max", s.max}};
}

nlohmann::json range_json(const LengthRange& range) {
  return {{"min", range.min}, {"max", range.max}};
}

const char* endpoint_name(Endpoint endpoint) {
  return endpoint == Endpoint::kChat ? "chat" : "completions";
}

int64_t count_of(const StepStats& s, const std::string& key) {
  const auto it = s.outcomes.find(key);
  return it == s.outcomes.end() ? 0 : it->second;
}

// Failures (other than 429 unless `with_429`), as "timeout 2, http_503 1".
std::string other_failures(const StepStats& s, bool with_429 = false) {
  std::string out;
  for (const auto& [key, count] : s.outcomes) {
    if (key == "ok" || (key == "http_429" && !with_429)) continue;
    out += fmt::format("{}{} {}", out.empty() ? "" : ", ", key, count);
  }
  return out.empty() ? "-" : out;
}

std::string ms(double value) {
  if (std::isnan(value)) return "-";
  return value >= 100 ? fmt::format("{:.0f}", value) : fmt::format("{:.1f}", value);
}

std::string number(double value) {
  return std::isnan(value) ? "NaN" : fmt::format("{:.6g}", value);
}

// Values for a log axis: NaN where the value is not positive.
std::string log_number(double value) { return value > 0 ? number(value) : "NaN"; }

}  // namespace

std::string load_label(const StepLoad& load) {
  return load.closed_loop ? fmt::format("c={}", load.value)
                          : fmt::format("rate={:g}/s", load.value);
}

nlohmann::json report_json(const RunReport& r) {
  const LoadtestConfig& c = *r.config;
  nlohmann::json out;
  out["tool"] = "llamaserve loadtest";
  out["command_line"] = c.command_line;
  out["url"] = c.url;
  out["model"] = r.model;
  out["endpoint"] = endpoint_name(c.endpoint);
  out["date"] = r.date_utc;
  out["load"] = c.concurrencies.empty() ? "rate" : "concurrency";
  out["prompt_format"] = r.prompt_format;
  nlohmann::json settings;
  settings["prompt_tokens"] = range_json(c.prompt_tokens);
  settings["output_tokens"] = range_json(c.output_tokens);
  settings["prompts_file"] = c.prompts_file;
  settings["shared_prefix_tokens"] = c.shared_prefix_tokens;
  settings["ignore_eos"] = c.ignore_eos;
  if (c.temperature) settings["temperature"] = *c.temperature;
  settings["requests_per_step"] = c.requests;
  settings["duration_s_per_step"] = c.duration_s;
  settings["warmup_requests"] = c.warmup_requests;
  settings["request_timeout_s"] = c.request_timeout_s;
  settings["max_connections"] = c.max_connections;
  settings["seed"] = c.seed;
  settings["slo_ttft_ms"] = c.slo_ttft_ms;
  settings["slo_itl_ms"] = c.slo_itl_ms;
  out["settings"] = settings;
  out["warmup"] = {{"requests", r.warmup_requests}, {"failed", r.warmup_failed}};
  nlohmann::json steps = nlohmann::json::array();
  for (const StepStats& s : r.steps) {
    nlohmann::json step;
    if (s.load.closed_loop) {
      step["concurrency"] = static_cast<int64_t>(s.load.value);
    } else {
      step["rate_per_s"] = s.load.value;
      step["max_send_lag_ms"] = s.max_send_lag_ms;
      step["waited_for_connection"] = s.waited_for_connection;
    }
    step["elapsed_s"] = s.elapsed_s;
    step["requests"] = s.requests;
    step["ok"] = s.ok;
    step["failed"] = s.failed;
    step["http_429"] = count_of(s, "http_429");
    step["outcomes"] = s.outcomes;
    step["output_tokens"] = s.output_tokens;
    step["prompt_tokens"] = s.prompt_tokens;
    step["requests_per_s"] = s.requests_per_s;
    step["output_tokens_per_s"] = s.output_tokens_per_s;
    step["ttft_ms"] = summary_json(s.ttft_ms);
    step["itl_ms"] = summary_json(s.itl_ms);
    step["tpot_ms"] = summary_json(s.tpot_ms);
    step["e2e_ms"] = summary_json(s.e2e_ms);
    step["output_tokens_per_request"] = summary_json(s.output_tokens_per_request);
    if (s.goodput_requests_per_s) {
      step["goodput"] = {{"requests_met", s.slo_met},
                         {"requests_per_s", *s.goodput_requests_per_s},
                         {"output_tokens_per_s", *s.goodput_tokens_per_s}};
    }
    steps.push_back(std::move(step));
  }
  out["steps"] = std::move(steps);
  return out;
}

std::string report_markdown(const RunReport& r) {
  const LoadtestConfig& c = *r.config;
  const bool slo = Slo{c.slo_ttft_ms, c.slo_itl_ms}.any();
  std::string out = "# llamaserve loadtest\n\n";
  out += fmt::format("- command: `{}`\n", c.command_line);
  out += fmt::format("- server: {} ({} endpoint), model: {}\n", c.url, endpoint_name(c.endpoint),
                     r.model.empty() ? "(server default)" : r.model);
  out += fmt::format("- date: {}\n", r.date_utc);
  if (c.prompts_file.empty()) {
    out += fmt::format(
        "- prompts: {} tokens ({}), output: {} tokens{}\n",
        c.prompt_tokens.fixed() ? fmt::format("{}", c.prompt_tokens.min)
                                : fmt::format("{}-{}", c.prompt_tokens.min, c.prompt_tokens.max),
        r.prompt_format,
        c.output_tokens.fixed() ? fmt::format("{}", c.output_tokens.min)
                                : fmt::format("{}-{}", c.output_tokens.min, c.output_tokens.max),
        c.ignore_eos ? " (ignore_eos)" : "");
  } else {
    out += fmt::format("- prompts: {}\n", c.prompts_file);
  }
  if (slo) {
    out += fmt::format("- goodput SLOs: TTFT <= {} ms, p99 ITL per request <= {} ms\n",
                       c.slo_ttft_ms > 0 ? fmt::format("{:g}", c.slo_ttft_ms) : "-",
                       c.slo_itl_ms > 0 ? fmt::format("{:g}", c.slo_itl_ms) : "-");
  }
  out += "- latencies in ms, from the client's clock; percentiles are nearest-rank\n\n";
  out +=
      "| load | ok | failed | 429 | other failures | req/s | out tok/s | TTFT p50 | TTFT p90 "
      "| TTFT p99 | TTFT max | ITL p50 | ITL p90 | ITL p99 | ITL max | e2e p50 | e2e p90 | "
      "e2e p99 | e2e max |";
  out += slo ? " goodput req/s | goodput tok/s |\n" : "\n";
  out += "| --- | ---: | ---: | ---: | --- |";
  for (int column = 0; column < (slo ? 16 : 14); ++column) out += " ---: |";
  out += "\n";
  for (const StepStats& s : r.steps) {
    out += fmt::format("| {} | {} | {} | {} | {} | {:.2f} | {:.1f} |", load_label(s.load), s.ok,
                       s.failed, count_of(s, "http_429"), other_failures(s), s.requests_per_s,
                       s.output_tokens_per_s);
    for (const Summary* m : {&s.ttft_ms, &s.itl_ms, &s.e2e_ms}) {
      out += fmt::format(" {} | {} | {} | {} |", ms(m->p50), ms(m->p90), ms(m->p99), ms(m->max));
    }
    if (slo) {
      out += fmt::format(" {:.2f} | {:.1f} |", s.goodput_requests_per_s.value_or(0),
                         s.goodput_tokens_per_s.value_or(0));
    }
    out += "\n";
  }
  return out;
}

std::string report_gnuplot(const RunReport& r, const std::string& svg_path,
                           const std::string& png_path) {
  const LoadtestConfig& c = *r.config;
  const bool closed = !c.concurrencies.empty();
  const bool slo = Slo{c.slo_ttft_ms, c.slo_itl_ms}.any();
  double x_min = 0, x_max = 0;
  bool any_ttft = false, any_itl = false;
  std::string data;
  data +=
      "# load tok_s req_s ttft_p50 ttft_p90 ttft_p99 ttft_max itl_p50 itl_p90 itl_p99 "
      "itl_max goodput_tok_s\n";
  for (size_t i = 0; i < r.steps.size(); ++i) {
    const StepStats& s = r.steps[i];
    x_min = i == 0 ? s.load.value : std::min(x_min, s.load.value);
    x_max = i == 0 ? s.load.value : std::max(x_max, s.load.value);
    any_ttft = any_ttft || s.ttft_ms.p50 > 0 || s.ttft_ms.max > 0;
    any_itl = any_itl || s.itl_ms.p50 > 0 || s.itl_ms.max > 0;
    data += fmt::format("{} {} {}", number(s.load.value), number(s.output_tokens_per_s),
                        number(s.requests_per_s));
    for (const Summary* m : {&s.ttft_ms, &s.itl_ms}) {
      data += fmt::format(" {} {} {} {}", log_number(m->p50), log_number(m->p90),
                          log_number(m->p99), log_number(m->max));
    }
    data += fmt::format(" {}\n", number(s.goodput_tokens_per_s.value_or(NAN)));
  }
  // Several loads a factor apart read best on a log axis; the range leaves room either side.
  const bool log_x = x_min > 0 && x_max / x_min >= 4;
  const std::string x_range =
      log_x ? fmt::format("[{:g}:{:g}]", x_min / 1.5, x_max * 1.5)
            : fmt::format("[{:g}:{:g}]", std::max(0.0, x_min - std::max(1.0, 0.1 * x_max)),
                          x_max + std::max(1.0, 0.1 * x_max));
  std::string gp;
  gp += "# Drawn by llamaserve loadtest: gnuplot report.gp redraws report.svg and report.png.\n";
  gp += "$data << EOD\n" + data + "EOD\n\n";
  gp += fmt::format("set xlabel '{}'\n", closed ? "concurrent streams" : "request rate (req/s)");
  gp += fmt::format("set xrange {}\n", x_range);
  if (log_x) gp += "set logscale x 2\n";
  gp += "set grid\nset key top left\nset style data linespoints\n";
  // One function draws the three panels, for each terminal in turn.
  auto panel = [](const std::string& title, int first_column, bool any) {
    std::string out = fmt::format("set title '{}'\nset ylabel 'ms'\nset logscale y\n", title);
    if (!any) {
      return out +
             "set yrange [1:10]\nset label 1 'no successful requests' at graph 0.3, graph "
             "0.5\nplot 100 notitle\nunset label 1\nset autoscale y\n";
    }
    out += "set autoscale y\n";
    out += fmt::format(
        "plot $data using 1:{0} title 'p50' pt 7, '' using 1:{1} title 'p90' pt 5, '' using "
        "1:{2} title 'p99' pt 9, '' using 1:{3} title 'max' pt 3\n",
        first_column, first_column + 1, first_column + 2, first_column + 3);
    return out;
  };
  std::string panels = "set multiplot layout 1,3 title 'llamaserve loadtest: " + c.url + "'\n";
  panels += panel("time to first token", 4, any_ttft);
  panels += panel("inter-token latency", 8, any_itl);
  panels += "set title 'throughput'\nunset logscale y\nset yrange [0:*]\n";
  panels +=
      "set ylabel 'output tokens/s'\nset y2label 'requests/s'\nset y2tics\nset ytics nomirror\n";
  panels += "set y2range [0:*]\n";
  panels += "plot $data using 1:2 title 'output tok/s' pt 7 axes x1y1";
  if (slo) panels += ", '' using 1:12 title 'goodput tok/s' pt 5 axes x1y1";
  panels += ", '' using 1:3 title 'req/s' pt 9 axes x1y2\n";
  panels += "unset y2tics\nunset y2label\nset ytics mirror\nset autoscale y\nunset multiplot\n";
  gp += fmt::format("set terminal svg size 1500,480 dynamic font 'sans,11'\nset output '{}'\n",
                    svg_path);
  gp += panels;
  gp += "set output\n";
  gp +=
      "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
      "  set terminal pngcairo size 1500,480 font 'sans,10'\n"
      "} else {\n"
      "  set terminal png size 1500,480\n"
      "}\n";
  gp += fmt::format("set output '{}'\n", png_path);
  gp += panels;
  gp += "set output\n";
  return gp;
}

std::string step_line(const StepStats& s) {
  return fmt::format(
      "{}: {} ok, {} failed ({}), {:.2f} req/s, {:.1f} out tok/s, TTFT p50 {} p99 {} ms, ITL p50 "
      "{} p99 {} ms, {:.1f} s",
      load_label(s.load), s.ok, s.failed, other_failures(s, /*with_429=*/true), s.requests_per_s,
      s.output_tokens_per_s, ms(s.ttft_ms.p50), ms(s.ttft_ms.p99), ms(s.itl_ms.p50),
      ms(s.itl_ms.p99), s.elapsed_s);
}

Status write_text_file(const std::string& path, const std::string& text) {
  const std::string temporary = path + ".tmp";
  std::FILE* f = std::fopen(temporary.c_str(), "wb");
  if (f == nullptr) return make_error(StatusCode::kIo, "cannot write {}", temporary);
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !written || std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    return make_error(StatusCode::kIo, "error writing {}", path);
  }
  return Status::ok();
}

}  // namespace llamaserve::loadtest
