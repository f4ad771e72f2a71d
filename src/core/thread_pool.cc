#include "core/thread_pool.h"

#include <algorithm>

#include "core/cpu_count.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace llamaserve {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// About 50 µs of spinning before a worker sleeps: long enough to cover the gap between
// consecutive ops of one forward pass, short enough not to burn a core while idle.
constexpr int kSpinIterations = 20000;

// How long the caller of run() spins for the last worker before yielding its core: long
// enough for a balanced split (the workers finish within microseconds of the caller).
constexpr int kCallerSpinIterations = 2000;

// Then it yields this many times before sleeping: a worker waiting for the caller's core (more
// runnable threads than cores) gets it at once, without the futex round trip of a sleep.
constexpr int kCallerYields = 200;

// A spinning worker yields its core once every this many pauses, for the same reason.
constexpr int kSpinsPerYield = 1024;

}  // namespace

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(std::max(1, n_threads)), finished_(new Finished[n_threads_]) {
  workers_.reserve(n_threads_ - 1);
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  wake_workers();
  for (auto& worker : workers_) worker.join();
}

int ThreadPool::default_threads() { return usable_cpus(); }

// Sequentially consistent on both sides: either the worker sees the new generation before
// it sleeps, or this sees the worker counted as a sleeper and wakes it under the mutex.
void ThreadPool::wake_workers() {
  generation_.fetch_add(1);
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lock(wake_mutex_);
    wake_.notify_all();
  }
}

// Counts rather than stops at the first unfinished worker: the loads are independent, so the
// core has all the workers' lines in flight at once.
bool ThreadPool::all_finished(uint32_t generation) const {
  int finished = 0;
  for (int i = 1; i < n_threads_; ++i) {
    finished += finished_[i].generation.load() == generation;
  }
  return finished == n_threads_ - 1;
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  task_ = &fn;
  const uint32_t generation = generation_.load(std::memory_order_relaxed) + 1;
  wake_workers();
  fn(0, n_threads_);
  for (int spin = 0; !all_finished(generation); ++spin) {
    if (spin < kCallerSpinIterations) {
      cpu_relax();
      continue;
    }
    if (spin < kCallerSpinIterations + kCallerYields) {
      std::this_thread::yield();
      continue;
    }
    // Sequentially consistent with the workers' stores: either a worker that finishes later
    // sees the flag and notifies under the mutex, or this sees it finished before waiting.
    std::unique_lock<std::mutex> lock(done_mutex_);
    caller_sleeping_.store(true);
    done_.wait(lock, [&] { return all_finished(generation); });
    caller_sleeping_.store(false);
    break;
  }
  task_ = nullptr;
}

void ThreadPool::parallel_for(size_t n, size_t grain,
                              const std::function<void(size_t, size_t)>& fn) {
  if (n == 0) return;
  grain = std::max<size_t>(1, grain);
  const size_t max_chunks = (n + grain - 1) / grain;
  const size_t n_chunks = std::min<size_t>(max_chunks, static_cast<size_t>(n_threads_));
  if (n_chunks <= 1) {
    fn(0, n);
    return;
  }
  run([&](int thread_index, int) {
    const size_t t = static_cast<size_t>(thread_index);
    if (t >= n_chunks) return;
    const size_t begin = n * t / n_chunks;
    const size_t end = n * (t + 1) / n_chunks;
    if (begin < end) fn(begin, end);
  });
}

void ThreadPool::worker_loop(int thread_index) {
  uint32_t seen =
      0;  // the generation at construction; a late-starting worker still runs the first task
  while (true) {
    uint32_t now = generation_.load(std::memory_order_acquire);
    for (int spin = 1; now == seen && spin <= kSpinIterations; ++spin) {
      if (spin % kSpinsPerYield == 0) {
        std::this_thread::yield();
      } else {
        cpu_relax();
      }
      now = generation_.load(std::memory_order_acquire);
    }
    if (now == seen) {
      std::unique_lock<std::mutex> lock(wake_mutex_);
      sleepers_.fetch_add(1);
      wake_.wait(lock, [&] { return generation_.load() != seen; });
      sleepers_.fetch_sub(1);
      continue;
    }
    seen = now;
    if (stop_.load(std::memory_order_acquire)) return;
    (*task_)(thread_index, n_threads_);
    finished_[thread_index].generation.store(now);
    // Only a worker that sees every part finished wakes a sleeping caller: the last one to
    // finish always does (its loads follow every other worker's store), and a caller woken
    // early would only go back to sleep.
    if (caller_sleeping_.load() && all_finished(now)) {
      std::lock_guard<std::mutex> lock(done_mutex_);
      done_.notify_one();
    }
  }
}

}  // namespace llamaserve
