// `llamaserve loadtest` as a library call: probes the server, warms it up, runs every step of
// the sweep and writes the reports (docs/loadtest.md).
#pragma once

#include "core/status.h"
#include "loadtest/config.h"

namespace llamaserve::loadtest {

struct RunOutcome {
  int64_t ok = 0;      // requests that succeeded, over every step
  int64_t failed = 0;  // and those that did not
};

// PRECONDITION: finalize_config(config) accepted it. An error means no report was written
// (bad settings, an output folder that cannot be written); failed requests are not errors.
Result<RunOutcome> run_loadtest(const LoadtestConfig& config);

}  // namespace llamaserve::loadtest
