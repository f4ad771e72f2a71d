#include "core/progress.h"

#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace llamaserve {
namespace {

constexpr auto kRedrawInterval = std::chrono::milliseconds(100);
constexpr int kBarWidth = 30;
constexpr size_t kMaxDetailChars = 40;
// Log style: quarter lines only once the job has taken this long.
constexpr auto kLogStepsAfter = std::chrono::seconds(1);

ProgressStyle resolve_style(ProgressStyle style, FILE* out) {
  if (style != ProgressStyle::kAuto) return style;
  return isatty(fileno(out)) ? ProgressStyle::kBar : ProgressStyle::kLines;
}

std::string format_seconds(double seconds) {
  if (seconds < 60.0) return fmt::format("{:.1f} s", seconds);
  const auto whole = static_cast<int64_t>(seconds);
  return fmt::format("{}m{:02}s", whole / 60, whole % 60);
}

}  // namespace

Result<ProgressStyle> parse_progress_style(std::string_view name) {
  if (name == "auto") return ProgressStyle::kAuto;
  if (name == "bar") return ProgressStyle::kBar;
  if (name == "lines") return ProgressStyle::kLines;
  if (name == "none") return ProgressStyle::kSilent;
  return make_error(StatusCode::kInvalidArgument,
                    "progress style '{}': use auto, bar, lines or none", name);
}

Progress::Progress(std::string label, uint64_t total, ProgressUnit unit, ProgressStyle style,
                   FILE* out)
    : label_(std::move(label)),
      total_(total),
      unit_(unit),
      style_(resolve_style(style, out)),
      out_(out),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_ - kRedrawInterval) {}

Progress::~Progress() {
  // A job that ends without finish() failed: leave the last bar on its line, claim nothing.
  std::lock_guard<std::mutex> lock(mutex_);
  if (!finished_ && drawn_ && style_ == ProgressStyle::kBar) {
    fmt::print(out_, "\n");
    std::fflush(out_);
  }
}

std::string Progress::format_amount(uint64_t value, ProgressUnit unit) {
  if (unit == ProgressUnit::kCount) return fmt::format("{}", value);
  const double v = static_cast<double>(value);
  if (value >= (1ull << 30)) return fmt::format("{:.2f} GiB", v / double(1ull << 30));
  if (value >= (1ull << 20)) return fmt::format("{:.1f} MiB", v / double(1ull << 20));
  if (value >= (1ull << 10)) return fmt::format("{:.1f} KiB", v / double(1ull << 10));
  return fmt::format("{} B", value);
}

uint64_t Progress::done_units() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

void Progress::set_detail(std::string_view detail) {
  std::lock_guard<std::mutex> lock(mutex_);
  detail_.assign(detail.substr(0, kMaxDetailChars));
}

void Progress::add(uint64_t n_units, std::string_view detail) {
  if (style_ == ProgressStyle::kSilent) return;
  std::lock_guard<std::mutex> lock(mutex_);
  advance_locked(done_ + std::min(n_units, total_ - done_), detail);  // done_ <= total_
}

void Progress::update(uint64_t done_units, std::string_view detail) {
  if (style_ == ProgressStyle::kSilent) return;
  std::lock_guard<std::mutex> lock(mutex_);
  advance_locked(std::max(done_, done_units), detail);
}

void Progress::advance_locked(uint64_t done_units, std::string_view detail) {
  if (finished_) return;
  done_ = std::min(total_, done_units);
  if (!detail.empty()) detail_.assign(detail.substr(0, kMaxDetailChars));
  if (style_ == ProgressStyle::kBar) {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_draw_ < kRedrawInterval) return;
    last_draw_ = now;
    drawn_ = true;
    // Clear to the end of the line: the previous draw may have been longer.
    fmt::print(out_, "\r{}\x1b[K", render_locked(false));
    std::fflush(out_);
    return;
  }
  // Lines: one per step crossed (several steps at once print one line).
  const int steps = style_ == ProgressStyle::kLog ? 4 : 10;
  const int step = total_ == 0 ? steps : static_cast<int>(done_ * steps / total_);
  if (step <= last_step_ || step >= steps) return;
  last_step_ = step;
  if (style_ == ProgressStyle::kLog) {
    if (std::chrono::steady_clock::now() - start_ >= kLogStepsAfter) {
      spdlog::info("{}", render_locked(false));
    }
    return;
  }
  fmt::print(out_, "{}\n", render_locked(false));
  std::fflush(out_);
}

void Progress::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_ || style_ == ProgressStyle::kSilent) {
    finished_ = true;
    return;
  }
  finished_ = true;
  if (style_ == ProgressStyle::kBar) {
    fmt::print(out_, "\r{}\x1b[K\n", render_locked(true));
  } else if (style_ == ProgressStyle::kLog) {
    spdlog::info("{}", render_locked(true));
    return;
  } else {
    fmt::print(out_, "{}\n", render_locked(true));
  }
  std::fflush(out_);
}

std::string Progress::render_locked(bool final) const {
  const double elapsed_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = elapsed_s > 0.0 ? static_cast<double>(done_) / elapsed_s : 0.0;
  const std::string rate_text = unit_ == ProgressUnit::kBytes
                                    ? format_amount(static_cast<uint64_t>(rate), unit_) + "/s"
                                    : fmt::format("{:.1f}/s", rate);
  if (final) {
    return fmt::format("{}: done, {} in {} ({})", label_, format_amount(done_, unit_),
                       format_seconds(elapsed_s), rate_text);
  }
  const double fraction = total_ == 0 ? 1.0 : static_cast<double>(done_) / total_;
  const std::string eta =
      rate > 0.0 ? format_seconds(static_cast<double>(total_ - done_) / rate) : "?";
  const std::string amounts =
      fmt::format("{}/{}", format_amount(done_, unit_), format_amount(total_, unit_));
  const std::string detail = detail_.empty() ? "" : "  " + detail_;
  if (style_ == ProgressStyle::kBar) {
    const int filled = static_cast<int>(fraction * kBarWidth);
    return fmt::format("{} [{}{}] {:3.0f}% {} {} ETA {}{}", label_, std::string(filled, '#'),
                       std::string(kBarWidth - filled, '.'), 100.0 * fraction, amounts, rate_text,
                       eta, detail);
  }
  return fmt::format("{}: {:.0f}% ({}, {} elapsed, ETA {}){}", label_, 100.0 * fraction, amounts,
                     format_seconds(elapsed_s), eta, detail);
}

}  // namespace llamaserve
