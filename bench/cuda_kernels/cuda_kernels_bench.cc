// Times the decode matvec of every weight type at LLaMA-7B shapes and the prefill GEMM path,
// and prints achieved bandwidth against a device-to-device copy measured here.
//
// Weights rotate through enough copies to exceed the L2 cache several times, so every launch
// streams from HBM as in a real forward pass. Each figure is the median over groups of
// launches timed with CUDA events. Weight contents are random bytes: the kernels' speed does
// not depend on the values.
//
// Usage: cuda_kernels_bench [--quick] [--csv FILE]
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/device_matrix.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/matvec.h"

namespace llamaserve::cuda {
namespace {

#define BENCH_CHECK(expr)                                                                      \
  do {                                                                                         \
    const cudaError_t e_ = (expr);                                                             \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s failed: %s (%s:%d)\n", #expr, cudaGetErrorString(e_), __FILE__, \
                   __LINE__);                                                                  \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

#define BENCH_OK(expr)                                                        \
  do {                                                                        \
    const Status s_ = (expr);                                                 \
    if (!s_.is_ok()) {                                                        \
      std::fprintf(stderr, "%s failed: %s\n", #expr, s_.to_string().c_str()); \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)

struct Options {
  bool quick = false;
  std::string csv;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median seconds per launch of `launch(i)` (i = launch index, for rotating buffers).
template <class Launch>
double time_launches(Launch launch, int groups, int per_group) {
  cudaEvent_t start, stop;
  BENCH_CHECK(cudaEventCreate(&start));
  BENCH_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < per_group; ++i) launch(i);  // warm-up
  std::vector<double> seconds;
  int index = 0;
  for (int g = 0; g < groups; ++g) {
    BENCH_CHECK(cudaEventRecord(start));
    for (int i = 0; i < per_group; ++i) launch(index++);
    BENCH_CHECK(cudaEventRecord(stop));
    BENCH_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    BENCH_CHECK(cudaEventElapsedTime(&ms, start, stop));
    seconds.push_back(ms * 1e-3 / per_group);
  }
  BENCH_CHECK(cudaEventDestroy(start));
  BENCH_CHECK(cudaEventDestroy(stop));
  return median(seconds);
}

// Bytes read + written per second by cudaMemcpy device to device of a 512 MB buffer.
double copy_bandwidth() {
  const size_t bytes = 512ull << 20;
  void *a = nullptr, *b = nullptr;
  BENCH_CHECK(cudaMalloc(&a, bytes));
  BENCH_CHECK(cudaMalloc(&b, bytes));
  BENCH_CHECK(cudaMemset(a, 1, bytes));
  const double s = time_launches(
      [&](int) { BENCH_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice)); }, 10, 3);
  BENCH_CHECK(cudaFree(a));
  BENCH_CHECK(cudaFree(b));
  return 2.0 * bytes / s;
}

float* device_floats(size_t n) {
  void* p = nullptr;
  BENCH_CHECK(cudaMalloc(&p, n * sizeof(float)));
  return static_cast<float*>(p);
}

// `copies` device copies of one random rows × cols matrix of `type` in the device layout.
struct RotatingWeights {
  std::vector<void*> buffers;
  std::vector<DeviceMatrix> views;
  ~RotatingWeights() {
    for (void* p : buffers) cudaFree(p);
  }
};

void make_weights(TensorType type, int64_t rows, int64_t cols, size_t min_total_bytes,
                  RotatingWeights& w) {
  const Result<DeviceMatrixLayout> layout = device_matrix_layout(type, rows, cols);
  BENCH_OK(layout.status());
  const size_t src_bytes = row_bytes(type, static_cast<size_t>(cols)) * rows;
  std::vector<uint32_t> host((src_bytes + 3) / 4);
  std::mt19937 rng(static_cast<uint32_t>(rows * 31 + cols + static_cast<int>(type)));
  for (uint32_t& x : host) x = rng();
  void* staging = nullptr;
  const size_t staging_bytes = std::min<size_t>(src_bytes, 64ull << 20);
  BENCH_CHECK(cudaMalloc(&staging, staging_bytes));
  const size_t copies =
      std::max<size_t>(2, (min_total_bytes + layout->total_bytes() - 1) / layout->total_bytes());
  for (size_t i = 0; i < copies; ++i) {
    void* p = nullptr;
    BENCH_CHECK(cudaMalloc(&p, layout->total_bytes()));
    w.buffers.push_back(p);
    if (i == 0) {
      Result<DeviceMatrix> view = upload_matrix(
          type, rows, cols, host.data(), static_cast<uint8_t*>(p), staging, staging_bytes, nullptr);
      BENCH_OK(view.status());
      w.views.push_back(*view);
    } else {
      BENCH_CHECK(cudaMemcpy(p, w.buffers[0], layout->total_bytes(), cudaMemcpyDeviceToDevice));
      DeviceMatrix v = w.views[0];
      const ptrdiff_t shift = static_cast<uint8_t*>(p) - static_cast<uint8_t*>(w.buffers[0]);
      v.quants += shift;
      if (v.scales != nullptr) v.scales += shift;
      w.views.push_back(v);
    }
  }
  BENCH_CHECK(cudaFree(staging));
}

int run(const Options& options) {
  cudaDeviceProp prop;
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, %.1f GiB, L2 %.1f MiB\n", prop.name, prop.multiProcessorCount,
              prop.totalGlobalMem / 1073741824.0, prop.l2CacheSize / 1048576.0);
  const double copy = copy_bandwidth();
  std::printf("device-to-device copy: %.1f GB/s (read + write)\n\n", copy / 1e9);
  FILE* csv = options.csv.empty() ? nullptr : std::fopen(options.csv.c_str(), "w");
  if (csv != nullptr)
    std::fprintf(csv, "kernel,type,rows,cols,act_rows,us,weight_gbps,pct_copy,tflops\n");

  const size_t rotate_bytes = std::max<size_t>(4ull * prop.l2CacheSize, 256ull << 20);
  const std::vector<TensorType> types = {TensorType::F16,  TensorType::BF16, TensorType::Q8_0,
                                         TensorType::Q4_0, TensorType::Q4_1, TensorType::Q4_K,
                                         TensorType::Q5_K, TensorType::Q6_K, TensorType::F32};
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {4096, 4096}, {11008, 4096}, {4096, 11008}};
  const std::vector<int> act_rows =
      options.quick ? std::vector<int>{1} : std::vector<int>{1, 2, 4, 8};
  const int groups = options.quick ? 5 : 15, per_group = 10;

  std::printf("matvec (decode): weight bandwidth vs copy\n");
  std::printf("%-6s %6s %6s %4s %10s %10s %7s\n", "type", "rows", "cols", "B", "us", "GB/s",
              "%copy");
  float* x = device_floats(16 * 11008);
  float* y = device_floats(16 * 11008);
  BENCH_CHECK(cudaMemset(x, 0, 16 * 11008 * sizeof(float)));
  for (TensorType type : types) {
    for (auto [rows, cols] : shapes) {
      RotatingWeights w;
      make_weights(type, rows, cols, rotate_bytes, w);
      const double bytes = static_cast<double>(matvec_weight_bytes(w.views[0]));
      for (int b : act_rows) {
        const double s = time_launches(
            [&](int i) {
              MatvecArgs a;
              a.w = w.views[i % w.views.size()];
              a.x = x;
              a.x_stride = cols;
              a.n_rows = b;
              a.y = y;
              a.y_stride = rows;
              BENCH_OK(matvec(a, nullptr));
            },
            groups, per_group);
        const double gbps = bytes / s / 1e9;
        std::printf("%-6s %6lld %6lld %4d %10.2f %10.1f %6.1f%%\n", type_name(type),
                    static_cast<long long>(rows), static_cast<long long>(cols), b, s * 1e6, gbps,
                    100.0 * bytes / s / copy);
        if (csv != nullptr) {
          std::fprintf(csv, "matvec,%s,%lld,%lld,%d,%.3f,%.1f,%.1f,\n", type_name(type),
                       static_cast<long long>(rows), static_cast<long long>(cols), b, s * 1e6, gbps,
                       100.0 * bytes / s / copy);
        }
      }
    }
  }

  std::printf("\ngemm (prefill, cuBLAS; quantized weights dequantized to f16 first)\n");
  std::printf("%-6s %6s %6s %5s %10s %10s\n", "type", "rows", "cols", "N", "us", "TFLOP/s");
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cublasCreate failed\n");
    return 1;
  }
  const std::vector<int> gemm_rows =
      options.quick ? std::vector<int>{512} : std::vector<int>{16, 64, 512};
  const int64_t max_n = 512, max_cols = 11008;
  void *act = nullptr, *scratch = nullptr;
  const size_t scratch_bytes = 128ull << 20;
  float* gx = device_floats(max_n * max_cols);
  float* gy = device_floats(max_n * max_cols);
  BENCH_CHECK(cudaMemset(gx, 0, max_n * max_cols * sizeof(float)));
  BENCH_CHECK(cudaMalloc(&act, gemm_act_half_bytes(max_n, max_cols)));
  BENCH_CHECK(cudaMalloc(&scratch, scratch_bytes));
  const GemmWorkspace ws{act, gemm_act_half_bytes(max_n, max_cols), scratch, scratch_bytes};
  for (TensorType type :
       {TensorType::F16, TensorType::BF16, TensorType::Q8_0, TensorType::Q4_K, TensorType::Q6_K}) {
    for (auto [rows, cols] : shapes) {
      RotatingWeights w;
      make_weights(type, rows, cols, rotate_bytes, w);
      for (int n : gemm_rows) {
        const double s = time_launches(
            [&](int i) {
              GemmArgs g;
              g.w = w.views[i % w.views.size()];
              g.x = gx;
              g.x_stride = cols;
              g.n_rows = n;
              g.y = gy;
              g.y_stride = rows;
              BENCH_OK(gemm(handle, g, ws, nullptr));
            },
            options.quick ? 3 : 7, 5);
        const double tflops = 2.0 * rows * cols * n / s / 1e12;
        std::printf("%-6s %6lld %6lld %5d %10.2f %10.1f\n", type_name(type),
                    static_cast<long long>(rows), static_cast<long long>(cols), n, s * 1e6, tflops);
        if (csv != nullptr) {
          std::fprintf(csv, "gemm,%s,%lld,%lld,%d,%.3f,,,%.2f\n", type_name(type),
                       static_cast<long long>(rows), static_cast<long long>(cols), n, s * 1e6,
                       tflops);
        }
      }
    }
  }
  cublasDestroy(handle);
  BENCH_CHECK(cudaFree(x));
  BENCH_CHECK(cudaFree(y));
  BENCH_CHECK(cudaFree(gx));
  BENCH_CHECK(cudaFree(gy));
  BENCH_CHECK(cudaFree(act));
  BENCH_CHECK(cudaFree(scratch));
  if (csv != nullptr) std::fclose(csv);
  return 0;
}

}  // namespace
}  // namespace llamaserve::cuda

int main(int argc, char** argv) {
  llamaserve::cuda::Options options;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      options.quick = true;
    } else if (std::strcmp(argv[i], "--csv") == 0 && i + 1 < argc) {
      options.csv = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--csv FILE]\n", argv[0]);
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  return llamaserve::cuda::run(options);
}
