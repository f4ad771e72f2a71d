// What the CUDA kernel micro-benchmark's parts share: the failed-call exit for Status results,
// timing of launch groups, and device buffers of random or given values (plain helpers; every
// failure prints what failed and exits).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "bench_check.h"
#include "core/status.h"

#define BENCH_OK(expr)                                                        \
  do {                                                                        \
    const Status s_ = (expr);                                                 \
    if (!s_.is_ok()) {                                                        \
      std::fprintf(stderr, "%s failed: %s\n", #expr, s_.to_string().c_str()); \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)

namespace llamaserve::cuda::kernel_bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median seconds per launch of `launch(i)` (i = launch index, for rotating buffers).
template <class Launch>
double time_launches(Launch launch, int groups, int per_group, cudaStream_t stream) {
  cudaEvent_t start, stop;
  BENCH_CHECK(cudaEventCreate(&start));
  BENCH_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < per_group; ++i) launch(i);  // warm-up
  std::vector<double> seconds;
  int index = 0;
  for (int g = 0; g < groups; ++g) {
    BENCH_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < per_group; ++i) launch(index++);
    BENCH_CHECK(cudaEventRecord(stop, stream));
    BENCH_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    BENCH_CHECK(cudaEventElapsedTime(&ms, start, stop));
    seconds.push_back(ms * 1e-3 / per_group);
  }
  BENCH_CHECK(cudaEventDestroy(start));
  BENCH_CHECK(cudaEventDestroy(stop));
  return median(seconds);
}

inline float* device_floats(size_t n) {
  void* p = nullptr;
  BENCH_CHECK(cudaMalloc(&p, n * sizeof(float)));
  return static_cast<float*>(p);
}

inline std::vector<float> normal_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

template <typename T>
T* upload(const std::vector<T>& host) {
  void* p = nullptr;
  BENCH_CHECK(cudaMalloc(&p, host.size() * sizeof(T)));
  BENCH_CHECK(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return static_cast<T*>(p);
}

}  // namespace llamaserve::cuda::kernel_bench
