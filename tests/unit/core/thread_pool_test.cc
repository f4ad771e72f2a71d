#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
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

TEST(ThreadPoolTest, RunCallsEveryThreadAndManyRegionsInARow) {
  ThreadPool pool(3);
  std::atomic<long> total{0};
  for (int region = 0; region < 2000; ++region) {
    pool.run([&](int thread_index, int n_threads) {
      EXPECT_EQ(n_threads, 3);
      total.fetch_add(thread_index + 1);
    });
  }
  EXPECT_EQ(total.load(), 2000L * (1 + 2 + 3));
}

}  // namespace
}  // namespace llamaserve
