// The load loop: one thread, one Boost.Asio io_context driving every connection, so that the
// client's own cost per event stays small at hundreds of streams. Idle keep-alive connections
// are kept between steps.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "loadtest/config.h"
#include "loadtest/stats.h"
#include "loadtest/workload.h"

namespace llamaserve::loadtest {

// When a step stops issuing requests (0 = not a limit); requests in flight then finish.
struct StepLimits {
  int64_t requests = 0;
  double duration_s = 0;
};

// Counts of the step so far, for a progress display.
struct StepCounters {
  int64_t started = 0, finished = 0, failed = 0, output_tokens = 0;
  double elapsed_s = 0;
};
// Called from the loop about five times a second and once when the step ends.
using ProgressCallback = std::function<void(const StepCounters&)>;
// The next request of the run.
using RequestSource = std::function<PlannedRequest()>;

class Runner {
 public:
  // Resolves the URL's host once.
  static Result<std::unique_ptr<Runner>> create(const LoadtestConfig& config);
  ~Runner();

  // One request with a plain (not streamed) answer, for probes: the record's body holds up to
  // 1 MiB of the answer.
  RequestRecord call(const std::string& method, const std::string& target, const std::string& body,
                     double timeout_s);

  // Closed loop: `streams` streams, each sending its next request when its last one ended
  // (after 100 ms when it could not connect, so that a dead server is not spun on).
  StepResult run_closed(int32_t streams, const StepLimits& limits, const RequestSource& next,
                        const ProgressCallback& progress);
  // Open loop: requests at the arrival times of a Poisson process of `rate_per_s`, each on
  // an idle connection or a new one (up to --max-connections; past it, arrivals queue).
  StepResult run_open(double rate_per_s, uint64_t seed, const StepLimits& limits,
                      const RequestSource& next, const ProgressCallback& progress);

  struct State;  // the loop, the server's address and idle connections (runner.cc)

 private:
  explicit Runner(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace llamaserve::loadtest
