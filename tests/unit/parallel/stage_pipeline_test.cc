// The stage threads of a pipeline: each stage runs the units in order, reads the previous
// stage's output of the same unit before that stage overwrites it with the next one, stages
// work on different units at the same time, and a failure stops the pass without a hang.
#include "parallel/stage_pipeline.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace llamaserve {
namespace {

using std::chrono::milliseconds;

// One output slot per stage, as a stage's activation buffer: stage s writes unit u's value
// there, stage s + 1 reads it (slowly, so that a stage that ran ahead would be seen).
class FakeStages {
 public:
  FakeStages(int n_stages, bool call_input_taken)
      : outputs_(static_cast<size_t>(n_stages), -1),
        ran_(static_cast<size_t>(n_stages)),
        call_input_taken_(call_input_taken) {}

  Status run(int stage, int32_t unit, const std::function<void()>& input_taken) {
    const size_t s = static_cast<size_t>(stage);
    {
      std::lock_guard lock(mutex_);
      ran_[s].push_back(unit);
    }
    if (stage > 0) {
      std::this_thread::sleep_for(milliseconds(2));
      const int32_t input = read(s - 1);
      if (input != 1000 * stage + unit - 1000) {
        return make_error(StatusCode::kInternal, "stage {} unit {} read {}", stage, unit, input);
      }
      if (call_input_taken_) input_taken();
    }
    std::this_thread::sleep_for(milliseconds(stage == 0 ? 0 : 1));
    write(s, 1000 * stage + unit);
    return Status::ok();
  }

  std::vector<int32_t> ran(int stage) {
    std::lock_guard lock(mutex_);
    return ran_[static_cast<size_t>(stage)];
  }

 private:
  int32_t read(size_t s) {
    std::lock_guard lock(mutex_);
    return outputs_[s];
  }
  void write(size_t s, int32_t value) {
    std::lock_guard lock(mutex_);
    outputs_[s] = value;
  }

  std::mutex mutex_;
  std::vector<int32_t> outputs_;
  std::vector<std::vector<int32_t>> ran_;
  bool call_input_taken_;
};

std::vector<int32_t> iota(int32_t n) {
  std::vector<int32_t> v;
  for (int32_t i = 0; i < n; ++i) v.push_back(i);
  return v;
}

TEST(StagePipelineTest, EachStageReadsTheUnitItsPredecessorWrote) {
  for (const bool call_input_taken : {true, false}) {
    StagePipeline pipeline(3);
    FakeStages stages(3, call_input_taken);
    const Status status =
        pipeline.run(12, [&](int stage, int32_t unit, const std::function<void()>& input_taken) {
          return stages.run(stage, unit, input_taken);
        });
    ASSERT_TRUE(status.is_ok()) << status.to_string();
    for (int s = 0; s < 3; ++s) EXPECT_EQ(stages.ran(s), iota(12)) << "stage " << s;
  }
}

// Stage 1 on unit u waits (at most 10 s) for stage 0 to start unit u + 1: in a pipeline that
// ran the stages in turn it would wait in vain.
TEST(StagePipelineTest, StagesWorkOnDifferentUnitsAtOnce) {
  constexpr int32_t kUnits = 5;
  StagePipeline pipeline(2);
  std::mutex mutex;
  std::condition_variable started_cv;
  int32_t stage0_started = 0;
  std::atomic<int> overlaps{0};
  const Status status =
      pipeline.run(kUnits, [&](int stage, int32_t unit, const std::function<void()>& taken) {
        if (stage == 0) {
          {
            std::lock_guard lock(mutex);
            stage0_started = unit + 1;
          }
          started_cv.notify_all();
          return Status::ok();
        }
        taken();
        if (unit + 1 < kUnits) {
          std::unique_lock lock(mutex);
          if (started_cv.wait_for(lock, std::chrono::seconds(10),
                                  [&] { return stage0_started >= unit + 2; })) {
            ++overlaps;
          }
        }
        return Status::ok();
      });
  ASSERT_TRUE(status.is_ok()) << status.to_string();
  EXPECT_EQ(overlaps.load(), kUnits - 1);
}

TEST(StagePipelineTest, AFailureStopsThePassAndTheNextPassRuns) {
  StagePipeline pipeline(3);
  std::mutex mutex;
  std::vector<std::vector<int32_t>> ran(3);
  auto record = [&](int stage, int32_t unit) {
    std::lock_guard lock(mutex);
    ran[static_cast<size_t>(stage)].push_back(unit);
  };
  const Status failed =
      pipeline.run(10, [&](int stage, int32_t unit, const std::function<void()>& taken) {
        record(stage, unit);
        if (stage == 1 && unit == 3) return make_error(StatusCode::kInternal, "stage 1 broke");
        if (stage > 0) taken();
        return Status::ok();
      });
  EXPECT_EQ(failed.code(), StatusCode::kInternal);
  EXPECT_EQ(failed.message(), "stage 1 broke");
  // Stage 0 waits for stage 1 to take unit u - 1 before it starts u: it got to unit 3 at most;
  // stage 2 to unit 2 at most (none starts once the failure is known).
  EXPECT_EQ(ran[1], iota(4));
  EXPECT_LE(ran[0].size(), 4u);
  EXPECT_EQ(ran[0], iota(static_cast<int32_t>(ran[0].size())));
  EXPECT_LE(ran[2].size(), 3u);
  EXPECT_EQ(ran[2], iota(static_cast<int32_t>(ran[2].size())));

  for (auto& r : ran) r.clear();
  const Status next =
      pipeline.run(6, [&](int stage, int32_t unit, const std::function<void()>& taken) {
        record(stage, unit);
        if (stage > 0) taken();
        return Status::ok();
      });
  ASSERT_TRUE(next.is_ok()) << next.to_string();
  for (const auto& r : ran) EXPECT_EQ(r, iota(6));
}

TEST(StagePipelineTest, NoUnitsAndOneStage) {
  StagePipeline pipeline(1);
  int calls = 0;
  ASSERT_TRUE(pipeline
                  .run(0,
                       [&](int, int32_t, const std::function<void()>&) {
                         ++calls;
                         return Status::ok();
                       })
                  .is_ok());
  EXPECT_EQ(calls, 0);
  std::vector<int32_t> units;
  ASSERT_TRUE(pipeline
                  .run(4,
                       [&](int stage, int32_t unit, const std::function<void()>&) {
                         EXPECT_EQ(stage, 0);
                         units.push_back(unit);
                         return Status::ok();
                       })
                  .is_ok());
  EXPECT_EQ(units, iota(4));
}

}  // namespace
}  // namespace llamaserve
