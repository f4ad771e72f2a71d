#include "core/env.h"

#include <cstdlib>

#include <spdlog/spdlog.h>

namespace llamaserve {

std::optional<int32_t> int_from_env(const char* name, long lo, long hi) {
  const char* env = std::getenv(name);
  if (env == nullptr) return std::nullopt;
  const long value = std::strtol(env, nullptr, 10);
  if (value >= lo && value <= hi) return static_cast<int32_t>(value);
  spdlog::warn("{}={}: not {} to {}, ignored", name, env, lo, hi);
  return std::nullopt;
}

}  // namespace llamaserve
