// The host barrier of a process's tensor-parallel ranks: no rank passes its k-th arrival before
// every rank has arrived k times, abort() releases every waiter, and a rank left alone gives up
// after the limit instead of waiting forever.
#include "parallel/rank_barrier.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace llamaserve {
namespace {

using std::chrono::milliseconds;

TEST(RankBarrierTest, NoRankPassesAnArrivalBeforeEveryRankHasMadeIt) {
  constexpr int kRanks = 4;
  constexpr int kRounds = 2000;
  RankBarrier barrier(kRanks);
  // arrived[k]: ranks that reached arrival k. A rank past arrival k must see all of them.
  std::vector<std::atomic<int>> arrived(kRounds);
  std::atomic<int> early{0};
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      for (int k = 0; k < kRounds; ++k) {
        // Uneven pace: some ranks reach the barrier late.
        if ((k + r) % 97 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
        arrived[static_cast<size_t>(k)].fetch_add(1);
        ASSERT_TRUE(barrier.arrive(r).is_ok());
        if (arrived[static_cast<size_t>(k)].load() != kRanks) early.fetch_add(1);
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  EXPECT_EQ(early.load(), 0);
}

TEST(RankBarrierTest, AbortReleasesEveryWaiterAndEveryLaterArrival) {
  RankBarrier barrier(3);
  std::vector<Status> results(2);
  std::vector<std::thread> waiting;
  for (int r = 0; r < 2; ++r) {
    waiting.emplace_back([&, r] { results[static_cast<size_t>(r)] = barrier.arrive(r); });
  }
  std::this_thread::sleep_for(milliseconds(50));  // both are waiting for rank 2
  barrier.abort();
  for (std::thread& t : waiting) t.join();
  for (const Status& s : results) EXPECT_EQ(s.code(), StatusCode::kCancelled) << s.to_string();
  EXPECT_EQ(barrier.arrive(2).code(), StatusCode::kCancelled);
}

TEST(RankBarrierTest, ARankLeftAloneGivesUpAfterTheLimit) {
  RankBarrier barrier(2, milliseconds(100));
  const auto start = std::chrono::steady_clock::now();
  const Status alone = barrier.arrive(0);
  EXPECT_EQ(alone.code(), StatusCode::kInternal);
  EXPECT_NE(alone.message().find("waited 100 ms"), std::string::npos) << alone.to_string();
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(100));
  EXPECT_TRUE(barrier.aborted());  // the ranks no longer agree: the group is done
  EXPECT_EQ(barrier.arrive(1).code(), StatusCode::kCancelled);
}

TEST(RankBarrierTest, OneRankNeverWaitsAndRanksOutOfRangeAreRefused) {
  RankBarrier one(1);
  for (int k = 0; k < 3; ++k) EXPECT_TRUE(one.arrive(0).is_ok());
  RankBarrier two(2);
  EXPECT_EQ(two.arrive(2).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(two.arrive(-1).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace llamaserve
