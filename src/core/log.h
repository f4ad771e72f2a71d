// Logging setup. Everything logs through spdlog's default logger; this only configures it,
// and writes structured events (a name and key=value fields) in the chosen format.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include <spdlog/spdlog.h>

#include "core/status.h"

namespace llamaserve {

enum class LogFormat {
  kText,  // 2026-01-02T03:04:05.678 info message key=value ...
  kJson,  // one JSON object a line: {"time":...,"level":...,"msg":...,"key":value...}
};

struct LogSettings {
  std::string level = "info";  // trace|debug|info|warn|error|off
  LogFormat format = LogFormat::kText;
};

Result<LogFormat> parse_log_format(std::string_view name);

// Logs go to stderr so stdout stays the program's output (generated text, JSON). May be
// called again: the latest settings apply to every later line.
void setup_logging(const LogSettings& settings);

// One field of an event. Strings are quoted in text lines only when they hold a space, a
// quote or a control character; doubles are written to 0.1.
struct LogField {
  std::string_view key;
  std::variant<std::string_view, int64_t, double> value;
};

// Logs `event` with its fields: "event key=value ..." as text, or the fields as members of the
// line's JSON object (with "msg": event).
void log_event(spdlog::level::level_enum level, std::string_view event,
               std::span<const LogField> fields);
inline void log_event(spdlog::level::level_enum level, std::string_view event,
                      std::initializer_list<LogField> fields) {
  log_event(level, event, std::span<const LogField>(fields.begin(), fields.size()));
}

}  // namespace llamaserve
