#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace llamaserve {

void setup_logging(std::string_view level) {
  auto logger = spdlog::get("llamaserve");
  if (!logger) logger = spdlog::stderr_color_mt("llamaserve");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  spdlog::set_level(spdlog::level::from_str(std::string(level)));
}

}  // namespace llamaserve
