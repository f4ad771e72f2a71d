// Logging setup. Everything logs through spdlog's default logger; this only configures it.
#pragma once

#include <string_view>

#include <spdlog/spdlog.h>

namespace llamaserve {

// level: trace|debug|info|warn|error|off. Logs go to stderr so stdout stays the program's
// output (generated text, JSON).
void setup_logging(std::string_view level);

}  // namespace llamaserve
