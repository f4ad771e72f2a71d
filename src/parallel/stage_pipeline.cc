#include "parallel/stage_pipeline.h"

#include <algorithm>
#include <utility>

namespace llamaserve {

StagePipeline::StagePipeline(int n_stages)
    : finished_(static_cast<size_t>(n_stages), 0), taken_(static_cast<size_t>(n_stages), 0) {
  threads_.reserve(static_cast<size_t>(n_stages));
  for (int s = 0; s < n_stages; ++s) threads_.emplace_back([this, s] { work(s); });
}

StagePipeline::~StagePipeline() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  for (std::thread& t : threads_) t.join();
}

Status StagePipeline::run(int32_t n_units, const StageFn& stage_fn) {
  if (n_units <= 0) return Status::ok();
  std::unique_lock lock(mutex_);
  n_units_ = n_units;
  stage_fn_ = &stage_fn;
  std::fill(finished_.begin(), finished_.end(), 0);
  std::fill(taken_.begin(), taken_.end(), 0);
  busy_ = n_stages();
  failed_ = false;
  error_ = Status::ok();
  ++pass_;
  changed_.notify_all();
  changed_.wait(lock, [&] { return busy_ == 0; });
  stage_fn_ = nullptr;
  return std::exchange(error_, Status::ok());
}

bool StagePipeline::may_start(int stage, int32_t unit) const {
  const size_t s = static_cast<size_t>(stage);
  const bool input_ready = stage == 0 || finished_[s - 1] > unit;
  const bool output_free = stage + 1 == n_stages() || taken_[s + 1] >= unit;
  return input_ready && output_free;
}

void StagePipeline::input_taken(int stage, int32_t unit) {
  {
    std::lock_guard lock(mutex_);
    int32_t& taken = taken_[static_cast<size_t>(stage)];
    taken = std::max(taken, unit + 1);
  }
  changed_.notify_all();
}

void StagePipeline::work(int stage) {
  const size_t s = static_cast<size_t>(stage);
  uint64_t seen = 0;
  std::unique_lock lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] { return stop_ || pass_ != seen; });
    if (stop_) return;
    seen = pass_;
    for (int32_t unit = 0; unit < n_units_; ++unit) {
      changed_.wait(lock, [&] { return failed_ || may_start(stage, unit); });
      if (failed_) break;
      const StageFn& fn = *stage_fn_;
      lock.unlock();
      const Status status = fn(stage, unit, [this, stage, unit] { input_taken(stage, unit); });
      lock.lock();
      if (!status.is_ok()) {
        if (!failed_) error_ = status;
        failed_ = true;
        changed_.notify_all();
        break;
      }
      finished_[s] = unit + 1;
      taken_[s] = std::max(taken_[s], unit + 1);
      changed_.notify_all();
    }
    --busy_;
    changed_.notify_all();
  }
}

}  // namespace llamaserve
