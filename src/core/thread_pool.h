// A fixed pool of worker threads for data-parallel loops (matmul rows, attention heads).
// Tuned for many short parallel regions per second: workers spin briefly on an atomic
// generation counter before sleeping, so a forward pass of hundreds of small ops does not
// pay a futex wake-up per op, and each worker reports the end of its part in a cache line
// of its own, so that a join reads the workers' lines side by side instead of the workers
// taking turns on one shared counter.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace llamaserve {

class ThreadPool {
 public:
  // n_threads counts the calling thread: a pool of 1 runs everything inline.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(thread_index, n_threads) once on every thread of the pool (the caller is
  // thread 0) and returns when all calls have returned. Not re-entrant: one caller at a time.
  void run(const std::function<void(int thread_index, int n_threads)>& fn);

  // Splits [0, n) into contiguous chunks, at least `grain` long, and calls fn(begin, end)
  // for each across the pool.
  void parallel_for(size_t n, size_t grain,
                    const std::function<void(size_t begin, size_t end)>& fn);

  // Threads to use when the user asks for "all": the CPUs this process may use (its affinity
  // mask, capped by a cgroup CPU quota; cpu_count.h).
  static int default_threads();

 private:
  // The last generation a worker has finished, alone in its cache line.
  struct alignas(64) Finished {
    std::atomic<uint32_t> generation{0};
  };

  void worker_loop(int thread_index);
  void wake_workers();
  bool all_finished(uint32_t generation) const;

  int n_threads_;
  std::vector<std::thread> workers_;
  std::unique_ptr<Finished[]> finished_;  // indexed by thread; [0] (the caller) unused
  const std::function<void(int, int)>* task_ = nullptr;
  alignas(64) std::atomic<uint32_t> generation_{0};
  std::atomic<int> sleepers_{0};  // workers blocked on wake_ (not spinning)
  std::mutex wake_mutex_;
  std::condition_variable wake_;
  // The caller of run() spins briefly for the workers, then yields its core a while, then
  // sleeps here, so that a worker waiting for a core (more runnable threads than cores) can
  // have the caller's.
  std::atomic<bool> caller_sleeping_{false};
  std::mutex done_mutex_;
  std::condition_variable done_;
  std::atomic<bool> stop_{false};
};

}  // namespace llamaserve
