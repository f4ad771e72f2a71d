// Draws the picture of a run by running gnuplot on the script report.h wrote.
#pragma once

#include <string>

#include "core/status.h"

namespace llamaserve::loadtest {

// Runs `gnuplot script_path` (the program found on PATH, or a path). kNotFound when the
// program cannot be started, kInternal when it failed; its own messages go to stderr.
Status run_gnuplot(const std::string& gnuplot, const std::string& script_path);

}  // namespace llamaserve::loadtest
