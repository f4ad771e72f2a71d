#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <numeric>
#include <vector>

namespace llamaserve {
namespace {

TEST(ThreadPoolTest, ParallelForCoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    for (size_t n : {0u, 1u, 7u, 769u, 5125u}) {
      std::vector<std::atomic<int>> hits(n);
      pool.parallel_for(n, 3, [&](size_t begin, size_t end) {
        for (size_t i = begin; i < end; ++i) hits[i].fetch_add(1);
      });
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
    }
  }
}

// Chunks are at least `grain` long (one chunk of everything when n is shorter), so a caller's
// grain says how little work is worth a thread: 31 rows at a grain of 16 stay in one chunk.
TEST(ThreadPoolTest, ParallelForChunksAreAtLeastTheGrain) {
  ThreadPool pool(4);
  for (size_t grain : {1u, 4u, 16u}) {
    for (size_t n : {1u, 15u, 16u, 17u, 31u, 32u, 33u, 100u}) {
      std::mutex mutex;
      std::vector<size_t> lengths;
      pool.parallel_for(n, grain, [&](size_t begin, size_t end) {
        std::lock_guard<std::mutex> lock(mutex);
        lengths.push_back(end - begin);
      });
      const size_t expected_chunks = std::min<size_t>(4, std::max<size_t>(1, n / grain));
      EXPECT_EQ(lengths.size(), expected_chunks) << "n=" << n << " grain=" << grain;
      for (size_t length : lengths) {
        EXPECT_GE(length, std::min(n, grain)) << "n=" << n << " grain=" << grain;
      }
    }
  }
}

TEST(ThreadPoolTest, RunCallsEveryPartAndManyRegionsInARow) {
  ThreadPool pool(3);
  std::atomic<long> total{0};
  for (int region = 0; region < 2000; ++region) {
    pool.run([&](int part, int n_parts) {
      EXPECT_EQ(n_parts, 3);
      total.fetch_add(part + 1);
    });
  }
  EXPECT_EQ(total.load(), 2000L * (1 + 2 + 3));
}

// Four threads on one CPU: most regions start while some worker waits for the core, and
// the threads that run take its part. Every part still runs exactly once per region, on one
// thread at a time, and run() returns only when all of them have.
TEST(ThreadPoolTest, PartsRunOnceWhenThreadsOutnumberCores) {
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &saved)) {
      CPU_SET(cpu, &one);
      break;
    }
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  {
    constexpr int kThreads = 4;
    constexpr int kRegions = 3000;
    ThreadPool pool(kThreads);  // the workers inherit the one CPU
    std::vector<std::atomic<int>> runs(kThreads);
    std::vector<std::atomic<int>> inside(kThreads);
    for (int region = 0; region < kRegions; ++region) {
      pool.run([&](int part, int n_parts) {
        ASSERT_EQ(n_parts, kThreads);
        EXPECT_EQ(inside[part].fetch_add(1), 0) << "part " << part << " run twice at once";
        runs[part].fetch_add(1);
        inside[part].fetch_sub(1);
      });
      for (int part = 0; part < kThreads; ++part) {
        ASSERT_EQ(runs[part].load(), region + 1) << "part " << part << " region " << region;
      }
    }
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);
}

}  // namespace
}  // namespace llamaserve
