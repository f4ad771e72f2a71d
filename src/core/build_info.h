// What was built: the version and the source commit, written at build time.
#pragma once

#include <string_view>

namespace llamaserve {

struct BuildInfo {
  std::string_view version;  // the project version, e.g. "0.1.0"
  std::string_view commit;   // short commit id, "-dirty" when the tree had changes; or "unknown"
};

// Defined in the generated build_info.cc of the llamaserve_build_info library, so that a new
// commit rebuilds one file and relinks only the programs that report it.
const BuildInfo& build_info();

}  // namespace llamaserve
