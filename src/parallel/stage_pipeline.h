// Units of work (micro-batches) through the stages of a layer pipeline, one thread per stage,
// so that stage s works on unit u while stage s + 1 works on unit u - 1. Threads and counters
// only, no devices: the multi-GPU executor says what running a unit on a stage means, the CPU
// unit tests check the order and the hand-over.
//
// Order: every stage runs the units in order 0, 1, ..., so what a unit reads of a stage's own
// state (its layers' KV cache) that earlier units wrote is there. Stage s starts unit u once
//  - stage s - 1 has finished u (its output holds u's rows), and
//  - stage s + 1 has taken its input of u - 1 from stage s's output, which u then overwrites:
//    the stage calls input_taken() as soon as it has copied its input; a stage that finishes
//    a unit without calling it has taken it then.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/status.h"

namespace llamaserve {

class StagePipeline {
 public:
  // Runs `unit` on `stage`. input_taken() may be called once, from any thread but before the
  // call returns, when the stage no longer needs the previous stage's output of this unit.
  using StageFn =
      std::function<Status(int stage, int32_t unit, const std::function<void()>& input_taken)>;

  // Starts one thread per stage. PRECONDITION: n_stages >= 1.
  explicit StagePipeline(int n_stages);
  ~StagePipeline();
  StagePipeline(const StagePipeline&) = delete;
  StagePipeline& operator=(const StagePipeline&) = delete;

  int n_stages() const { return static_cast<int>(threads_.size()); }

  // Runs units [0, n_units) through every stage and returns once every stage is idle. A stage
  // that fails stops there; the others finish the unit they are running and take no more.
  // Returns the first error. Calls do not overlap (one caller at a time).
  Status run(int32_t n_units, const StageFn& stage_fn);

 private:
  void work(int stage);
  // PRECONDITION: mutex_ held.
  bool may_start(int stage, int32_t unit) const;
  void input_taken(int stage, int32_t unit);

  std::mutex mutex_;
  std::condition_variable changed_;
  bool stop_ = false;
  uint64_t pass_ = 0;  // incremented by run(): the workers start the new pass
  int32_t n_units_ = 0;
  const StageFn* stage_fn_ = nullptr;
  std::vector<int32_t> finished_;  // per stage: units finished in this pass
  std::vector<int32_t> taken_;     // per stage: units whose input it has taken
  int busy_ = 0;                   // stages still in this pass
  bool failed_ = false;
  Status error_;
  std::vector<std::thread> threads_;  // last: started once the state above exists
};

}  // namespace llamaserve
