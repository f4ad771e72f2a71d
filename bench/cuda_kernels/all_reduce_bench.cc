// Latency of one all-reduce over two GPUs at the sizes tensor parallelism uses (hidden rows of
// a 4096-wide model: 1, 8, 256 and 512 rows), through NCCL and through the peer-to-peer
// kernel, each rank on its own thread and stream, as the tensor-parallel executor runs them.
// Also the peer copy bandwidth between the two devices. Prints a markdown table.
//
//   all_reduce_bench [--reps N] [--markdown FILE]
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/peer_all_reduce.h"
#include "bench_check.h"

namespace {

using llamaserve::cuda::PeerAllReduce;

// Median microseconds per call of `fn(rank, data, count, stream)` run `reps` times in a row on
// both ranks, timed by each rank's wall clock around the whole run after a warm-up.
template <typename Fn>
double time_us(size_t count, int reps, Fn fn) {
  std::vector<double> per_rank(2);
  auto body = [&](int r) {
    BENCH_CHECK(cudaSetDevice(r));
    cudaStream_t stream;
    BENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    float* data = nullptr;
    BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&data), count * sizeof(float)));
    BENCH_CHECK(cudaMemset(data, 0, count * sizeof(float)));
    for (int i = 0; i < 10; ++i) fn(r, data, count, stream);
    BENCH_CHECK(cudaStreamSynchronize(stream));
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) fn(r, data, count, stream);
    BENCH_CHECK(cudaStreamSynchronize(stream));
    per_rank[static_cast<size_t>(r)] =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count() /
        reps;
    BENCH_CHECK(cudaFree(data));
    BENCH_CHECK(cudaStreamDestroy(stream));
  };
  std::thread a(body, 0), b(body, 1);
  a.join();
  b.join();
  return std::max(per_rank[0], per_rank[1]);
}

double peer_copy_gbps() {
  constexpr size_t kBytes = 256ull << 20;
  void *src = nullptr, *dst = nullptr;
  BENCH_CHECK(cudaSetDevice(0));
  BENCH_CHECK(cudaMalloc(&src, kBytes));
  BENCH_CHECK(cudaSetDevice(1));
  BENCH_CHECK(cudaMalloc(&dst, kBytes));
  cudaStream_t stream;
  BENCH_CHECK(cudaStreamCreate(&stream));
  BENCH_CHECK(cudaMemcpyPeerAsync(dst, 1, src, 0, kBytes, stream));
  BENCH_CHECK(cudaStreamSynchronize(stream));
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 10; ++i) BENCH_CHECK(cudaMemcpyPeerAsync(dst, 1, src, 0, kBytes, stream));
  BENCH_CHECK(cudaStreamSynchronize(stream));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  BENCH_CHECK(cudaStreamDestroy(stream));
  BENCH_CHECK(cudaFree(dst));
  BENCH_CHECK(cudaSetDevice(0));
  BENCH_CHECK(cudaFree(src));
  return 10.0 * kBytes / s / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 200;
  std::string markdown;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--markdown") == 0 && i + 1 < argc)
      markdown = argv[++i];
  }
  int devices = 0;
  BENCH_CHECK(cudaGetDeviceCount(&devices));
  if (devices < 2) {
    std::fprintf(stderr, "all_reduce_bench: needs 2 CUDA devices, %d visible\n", devices);
    return 1;
  }
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  ncclComm_t comms[2];
  const int ids[2] = {0, 1};
  if (ncclCommInitAll(comms, 2, ids) != ncclSuccess) {
    std::fprintf(stderr, "all_reduce_bench: ncclCommInitAll failed\n");
    return 1;
  }
  constexpr size_t kPeerCapacity = 32768;
  auto peer = PeerAllReduce::create({0, 1}, kPeerCapacity);
  std::string out =
      "| floats | bytes per rank | NCCL us | peer-to-peer kernel us | NCCL GB/s |\n"
      "| ---: | ---: | ---: | ---: | ---: |\n";
  for (size_t count : {size_t{4096}, size_t{32768}, size_t{1} << 20, size_t{2} << 20}) {
    const double nccl = time_us(count, reps, [&](int r, float* data, size_t n, cudaStream_t s) {
      ncclAllReduce(data, data, n, ncclFloat, ncclSum, comms[r], s);
    });
    std::string peer_us = "-";
    if (peer.is_ok() && count <= kPeerCapacity) {
      const double us = time_us(count, reps, [&](int r, float* data, size_t n, cudaStream_t s) {
        (void)(*peer)->run(r, data, n, s);
      });
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.1f", us);
      peer_us = buf;
    }
    char line[256];
    std::snprintf(line, sizeof line, "| %zu | %zu | %.1f | %s | %.1f |\n", count,
                  count * sizeof(float), nccl, peer_us.c_str(),
                  static_cast<double>(count * sizeof(float)) / nccl / 1e3);
    out += line;
  }
  char copy[128];
  std::snprintf(copy, sizeof copy, "\npeer copy cuda:0 -> cuda:1: %.1f GB/s\n", peer_copy_gbps());
  out += copy;
  std::fputs(out.c_str(), stdout);
  if (!markdown.empty()) {
    if (FILE* f = std::fopen(markdown.c_str(), "w")) {
      std::fputs(out.c_str(), f);
      std::fclose(f);
    }
  }
  for (ncclComm_t c : comms) ncclCommDestroy(c);
  return 0;
}
