// A fixed pool of worker threads for data-parallel loops (matmul rows, attention heads).
// Tuned for many short parallel regions per second: workers spin briefly on an atomic
// generation counter before sleeping, so a forward pass of hundreds of small ops does not
// pay a futex wake-up per op, and each part of a region is claimed and reported finished in
// a cache line of its own, so that a join reads the parts' lines side by side instead of the
// threads taking turns on one shared counter.
//
// A region has one part per thread, and thread i normally runs part i. A thread that has
// finished its part takes any part no thread has started: a worker that has lost its core
// (more runnable threads than cores, a busy neighbour) or is still waking up no longer holds
// the region up, and the join waits only for parts that have started.
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

  // Calls fn(part, n_parts) once for every part in [0, size()), in parallel across the pool,
  // and returns when all calls have returned. Each part runs on one thread, usually the
  // thread of the same index (the caller is 0), so per-part scratch indexed by `part` is
  // never shared. Not re-entrant: one caller at a time.
  void run(const std::function<void(int part, int n_parts)>& fn);

  // Splits [0, n) into contiguous chunks, at least `grain` long, and calls fn(begin, end)
  // for each across the pool.
  void parallel_for(size_t n, size_t grain,
                    const std::function<void(size_t begin, size_t end)>& fn);

  // Threads to use when the user asks for "all": the CPUs this process may use (its affinity
  // mask, capped by a cgroup CPU quota; cpu_count.h).
  static int default_threads();

 private:
  // The last generation in which a part was claimed by a thread and in which it finished,
  // alone in their cache line. Every region claims every part, so a part is free in
  // generation g exactly when its claim still reads g - 1.
  struct alignas(64) Part {
    std::atomic<uint32_t> claimed{0};
    std::atomic<uint32_t> finished{0};
  };

  void worker_loop(int thread_index);
  void wake_workers();
  bool claim(int part, uint32_t generation);
  void run_part(int part, uint32_t generation);
  // Runs the parts of the region no thread has claimed yet; true when it ran any.
  bool run_free_parts(int first, uint32_t generation);
  bool all_finished(uint32_t generation) const;

  int n_threads_;
  std::vector<std::thread> workers_;
  std::unique_ptr<Part[]> parts_;
  std::atomic<const std::function<void(int, int)>*> task_{nullptr};
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
