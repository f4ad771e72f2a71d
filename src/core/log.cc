#include "core/log.h"

#include <atomic>
#include <cmath>
#include <ctime>

#include <spdlog/fmt/chrono.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>

namespace llamaserve {
namespace {

std::atomic<LogFormat> g_format{LogFormat::kText};

// Marks a payload that log_event already rendered as JSON members.
constexpr char kRenderedFields = '\x1f';

// Length of the valid UTF-8 sequence at the start of `s`, or 0.
size_t utf8_sequence_length(std::string_view s) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = byte(0);
  size_t length = 0;
  uint32_t min_code = 0;
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) {
    length = 2;
    min_code = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3;
    min_code = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4;
    min_code = 0x10000;
  } else {
    return 0;
  }
  if (s.size() < length) return 0;
  uint32_t code = lead & (0x7F >> length);
  for (size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xC0) != 0x80) return 0;
    code = (code << 6) | (byte(i) & 0x3F);
  }
  if (code < min_code || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return 0;
  return length;
}

// Appends `text` as a JSON string; bytes that are not UTF-8 become U+FFFD.
void append_json_string(std::string_view text, spdlog::memory_buf_t& out) {
  out.push_back('"');
  while (!text.empty()) {
    const unsigned char c = static_cast<unsigned char>(text.front());
    const size_t length = utf8_sequence_length(text);
    if (length == 0) {
      fmt::format_to(std::back_inserter(out), "\\ufffd");
      text.remove_prefix(1);
      continue;
    }
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      fmt::format_to(std::back_inserter(out), "\\n");
    } else if (c < 0x20 || c == 0x7F) {
      fmt::format_to(std::back_inserter(out), "\\u{:04x}", c);
    } else {
      out.append(text.data(), text.data() + length);
    }
    text.remove_prefix(length);
  }
  out.push_back('"');
}

bool needs_quotes(std::string_view text) {
  if (text.empty()) return true;
  for (char c : text) {
    if (c == ' ' || c == '"' || c == '=' || static_cast<unsigned char>(c) < 0x20) return true;
  }
  return false;
}

double tenths(double value) { return std::round(value * 10.0) / 10.0; }

// {"time":"2026-01-02T03:04:05.678Z","level":"info","msg":"..."} with the members that
// log_event rendered in place of "msg" when it wrote the line.
class JsonLineFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const auto since_epoch = msg.time.time_since_epoch();
    const std::time_t seconds =
        std::chrono::duration_cast<std::chrono::seconds>(since_epoch).count();
    const auto millis =
        std::chrono::duration_cast<std::chrono::milliseconds>(since_epoch).count() % 1000;
    std::tm utc{};
    gmtime_r(&seconds, &utc);
    fmt::format_to(std::back_inserter(dest), "{{\"time\":\"{:%Y-%m-%dT%H:%M:%S}.{:03d}Z\",", utc,
                   static_cast<int>(millis));
    const auto level = spdlog::level::to_string_view(msg.level);
    fmt::format_to(std::back_inserter(dest), "\"level\":\"{}\",",
                   std::string_view(level.data(), level.size()));
    const std::string_view payload(msg.payload.data(), msg.payload.size());
    if (!payload.empty() && payload.front() == kRenderedFields) {
      dest.append(payload.data() + 1, payload.data() + payload.size());
    } else {
      fmt::format_to(std::back_inserter(dest), "\"msg\":");
      append_json_string(payload, dest);
    }
    fmt::format_to(std::back_inserter(dest), "}}\n");
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonLineFormatter>();
  }
};

}  // namespace

Result<LogFormat> parse_log_format(std::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  return make_error(StatusCode::kInvalidArgument, "unknown log format '{}' (text or json)", name);
}

void setup_logging(const LogSettings& settings) {
  auto logger = spdlog::get("llamaserve");
  if (!logger) logger = spdlog::stderr_color_mt("llamaserve");
  spdlog::set_default_logger(logger);
  g_format = settings.format;
  if (settings.format == LogFormat::kJson) {
    spdlog::set_formatter(std::make_unique<JsonLineFormatter>());
  } else {
    spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  }
  spdlog::set_level(spdlog::level::from_str(settings.level));
}

void log_event(spdlog::level::level_enum level, std::string_view event,
               std::span<const LogField> fields) {
  if (!spdlog::should_log(level)) return;
  spdlog::memory_buf_t line;
  auto out = std::back_inserter(line);
  if (g_format == LogFormat::kJson) {
    line.push_back(kRenderedFields);
    fmt::format_to(out, "\"msg\":");
    append_json_string(event, line);
    for (const LogField& field : fields) {
      line.push_back(',');
      append_json_string(field.key, line);
      line.push_back(':');
      if (const auto* text = std::get_if<std::string_view>(&field.value)) {
        append_json_string(*text, line);
      } else if (const auto* integer = std::get_if<int64_t>(&field.value)) {
        fmt::format_to(out, "{}", *integer);
      } else {
        fmt::format_to(out, "{}", tenths(std::get<double>(field.value)));
      }
    }
  } else {
    line.append(event.data(), event.data() + event.size());
    for (const LogField& field : fields) {
      fmt::format_to(out, " {}=", field.key);
      if (const auto* text = std::get_if<std::string_view>(&field.value)) {
        if (needs_quotes(*text)) {
          line.push_back('"');
          for (char c : *text) {
            if (c == '"' || c == '\\') line.push_back('\\');
            line.push_back(static_cast<unsigned char>(c) < 0x20 ? ' ' : c);
          }
          line.push_back('"');
        } else {
          line.append(text->data(), text->data() + text->size());
        }
      } else if (const auto* integer = std::get_if<int64_t>(&field.value)) {
        fmt::format_to(out, "{}", *integer);
      } else {
        fmt::format_to(out, "{:.1f}", std::get<double>(field.value));
      }
    }
  }
  spdlog::log(level, "{}", std::string_view(line.data(), line.size()));
}

}  // namespace llamaserve
