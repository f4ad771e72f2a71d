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
    : n_threads_(std::max(1, n_threads)), parts_(new Part[n_threads_]) {
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

// A thread holding a generation whose region has closed (it lost its core between reading
// the generation and getting here) finds every claim newer than it expects and runs nothing.
bool ThreadPool::claim(int part, uint32_t generation) {
  std::atomic<uint32_t>& claimed = parts_[part].claimed;
  uint32_t expected = generation - 1;
  return claimed.load(std::memory_order_relaxed) == expected &&
         claimed.compare_exchange_strong(expected, generation);
}

// The task is read after the claim: the region cannot close, and the caller cannot set the
// next region's task, before this part is finished.
void ThreadPool::run_part(int part, uint32_t generation) {
  (*task_.load())(part, n_threads_);
  parts_[part].finished.store(generation);
  // Only a thread that sees every part finished wakes a sleeping caller: the last one to
  // finish always does (its loads follow every other part's store), and a caller woken early
  // would only go back to sleep.
  if (caller_sleeping_.load() && all_finished(generation)) {
    std::lock_guard<std::mutex> lock(done_mutex_);
    done_.notify_one();
  }
}

bool ThreadPool::run_free_parts(int first, uint32_t generation) {
  bool ran = false;
  for (int k = 0; k < n_threads_; ++k) {
    const int part = (first + k) % n_threads_;
    if (claim(part, generation)) {
      run_part(part, generation);
      ran = true;
    }
  }
  return ran;
}

// Counts rather than stops at the first unfinished part: the loads are independent, so the
// core has all the parts' lines in flight at once.
bool ThreadPool::all_finished(uint32_t generation) const {
  int finished = 0;
  for (int i = 0; i < n_threads_; ++i) {
    finished += parts_[i].finished.load() == generation;
  }
  return finished == n_threads_;
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  task_.store(&fn);
  const uint32_t generation = generation_.load(std::memory_order_relaxed) + 1;
  wake_workers();
  if (claim(0, generation)) run_part(0, generation);
  for (int spin = 0; !all_finished(generation); ++spin) {
    // A part still unclaimed belongs to a worker that has not started: run it here.
    if (run_free_parts(1, generation)) continue;
    if (spin < kCallerSpinIterations) {
      cpu_relax();
      continue;
    }
    if (spin < kCallerSpinIterations + kCallerYields) {
      std::this_thread::yield();
      continue;
    }
    // Every part is claimed (the scan above found none free) and its thread will finish it.
    // Sequentially consistent with the parts' stores: either the thread that finishes the
    // last part sees the flag and notifies under the mutex, or this sees them finished
    // before waiting.
    std::unique_lock<std::mutex> lock(done_mutex_);
    caller_sleeping_.store(true);
    done_.wait(lock, [&] { return all_finished(generation); });
    caller_sleeping_.store(false);
    break;
  }
  task_.store(nullptr);
}

void ThreadPool::parallel_for(size_t n, size_t grain,
                              const std::function<void(size_t, size_t)>& fn) {
  if (n == 0) return;
  grain = std::max<size_t>(1, grain);
  const size_t max_chunks = std::max<size_t>(1, n / grain);  // each at least grain long
  const size_t n_chunks = std::min<size_t>(max_chunks, static_cast<size_t>(n_threads_));
  if (n_chunks <= 1) {
    fn(0, n);
    return;
  }
  run([&](int part, int) {
    const size_t t = static_cast<size_t>(part);
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
    if (claim(thread_index, now)) run_part(thread_index, now);
    // Then the parts of the next threads round the ring, as long as they have not started:
    // one line read in a healthy region, and a run of late threads is taken part by part (the
    // caller's scans cover the rest).
    for (int k = 1; k < n_threads_; ++k) {
      const int part = (thread_index + k) % n_threads_;
      if (!claim(part, now)) break;
      run_part(part, now);
    }
  }
}

}  // namespace llamaserve
