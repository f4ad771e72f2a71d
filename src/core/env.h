// Integer settings read from the environment (the LLAMASERVE_* overrides used for measurements).
#pragma once

#include <cstdint>
#include <optional>

namespace llamaserve {

// The integer in environment variable `name` when it lies in [lo, hi] (a warning when it is set
// otherwise); nullopt when it is unset or rejected.
std::optional<int32_t> int_from_env(const char* name, long lo, long hi);

}  // namespace llamaserve
