// The prefill GEMM shapes of the 7B model, on one GPU and per tensor-parallel rank (tp=2):
// cuBLAS's default choice (cublasGemmEx, as gemm.cc calls it) against every algorithm the
// cublasLt heuristic offers for the same product, each timed alone. Says how much an
// algorithm chosen by measurement would gain over the default. Prints a markdown table.
//
//   gemm_algos_bench [--rows 128,512,2048] [--algos 32] [--reps 20] [--markdown FILE]
//
// The product is the executor's: y (rows x n, fp32 or f16 halves) = x (rows x k, f16) W^T with
// W (n x k, f16, row-major), in cuBLAS's terms C = op_T(A) B with A the weights. The weights
// rotate over copies larger than L2 together, as the layers' weights do.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_check.h"

namespace {

#define CHECK_CUBLAS(call)                                            \
  do {                                                                \
    const cublasStatus_t s_ = (call);                                 \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                \
      std::fprintf(stderr, "%s: cuBLAS status %d\n", #call, int(s_)); \
      std::exit(1);                                                   \
    }                                                                 \
  } while (0)

struct Shape {
  const char* name;
  int n;  // output features (weight rows)
  int k;  // input features
};

// 7B: Q/K/V merged (3 x 4096), output projection, gate/up merged (2 x 11008), down; per rank
// of tp=2 the output features (Q/K/V, gate/up) or the input features (o, down) halve.
constexpr Shape kShapes[] = {
    {"qkv", 12288, 4096},         {"o", 4096, 4096},        {"gate/up", 22016, 4096},
    {"down", 4096, 11008},        {"qkv tp2", 6144, 4096},  {"o tp2", 4096, 2048},
    {"gate/up tp2", 11008, 4096}, {"down tp2", 4096, 5504},
};

constexpr size_t kWorkspaceBytes = 32u << 20;

std::vector<int> parse_list(const char* text) {
  std::vector<int> out;
  for (const char* p = text; *p != '\0';) {
    out.push_back(std::atoi(p));
    const char* comma = std::strchr(p, ',');
    if (comma == nullptr) break;
    p = comma + 1;
  }
  return out;
}

// Median microseconds of `launch(copy)` over reps calls, the weights rotating over the copies.
template <typename Launch>
float time_us(int reps, int copies, cudaStream_t stream, Launch launch) {
  cudaEvent_t start, stop;
  BENCH_CHECK(cudaEventCreate(&start));
  BENCH_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) {
    if (!launch(i % copies)) return -1.0f;
  }
  std::vector<float> times;
  for (int i = 0; i < reps; ++i) {
    BENCH_CHECK(cudaEventRecord(start, stream));
    if (!launch(i % copies)) return -1.0f;
    BENCH_CHECK(cudaEventRecord(stop, stream));
    BENCH_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    BENCH_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms * 1000.0f);
  }
  BENCH_CHECK(cudaEventDestroy(start));
  BENCH_CHECK(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> rows_list = {128, 512, 2048};
  int max_algos = 32, reps = 20;
  const char* markdown = nullptr;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--rows") == 0)
      rows_list = parse_list(argv[i + 1]);
    else if (std::strcmp(argv[i], "--algos") == 0)
      max_algos = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--reps") == 0)
      reps = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--markdown") == 0)
      markdown = argv[i + 1];
  }
  cudaStream_t stream;
  BENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasHandle_t handle;
  CHECK_CUBLAS(cublasCreate(&handle));
  CHECK_CUBLAS(cublasSetStream(handle, stream));
  cublasLtHandle_t lt;
  CHECK_CUBLAS(cublasLtCreate(&lt));
  void* workspace = nullptr;
  BENCH_CHECK(cudaMalloc(&workspace, kWorkspaceBytes));
  CHECK_CUBLAS(cublasSetWorkspace(handle, workspace, kWorkspaceBytes));

  int max_n = 0, max_k = 0, max_rows = 0;
  for (const Shape& s : kShapes) {
    max_n = std::max(max_n, s.n);
    max_k = std::max(max_k, s.k);
  }
  for (int r : rows_list) max_rows = std::max(max_rows, r);
  // Copies of the largest weight adding up to more than the 50 MB L2 several times over.
  const size_t weight_bytes = static_cast<size_t>(max_n) * max_k * 2;
  const int copies = static_cast<int>(std::max<size_t>(2, (400u << 20) / weight_bytes + 1));
  std::vector<void*> weights(static_cast<size_t>(copies));
  for (void*& w : weights) {
    BENCH_CHECK(cudaMalloc(&w, weight_bytes));
    BENCH_CHECK(cudaMemset(w, 0x11, weight_bytes));
  }
  void *x = nullptr, *y = nullptr;
  BENCH_CHECK(cudaMalloc(&x, static_cast<size_t>(max_rows) * max_k * 2));
  BENCH_CHECK(cudaMemset(x, 0x11, static_cast<size_t>(max_rows) * max_k * 2));
  BENCH_CHECK(cudaMalloc(&y, static_cast<size_t>(max_rows) * max_n * 4));

  std::string table =
      "| shape | n x k | rows | out | default us | default TFLOP/s | best algo us | best TFLOP/s "
      "| gain | algos tried |\n| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: "
      "|\n";
  std::printf("%s", table.c_str());
  const float alpha = 1.0f, beta = 0.0f;
  for (const Shape& s : kShapes) {
    for (int rows : rows_list) {
      for (int half_out = 1; half_out >= 0; --half_out) {
        const cudaDataType_t out_type = half_out ? CUDA_R_16F : CUDA_R_32F;
        const double flop = 2.0 * rows * s.n * s.k;
        const float base = time_us(reps, copies, stream, [&](int c) {
          return cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, s.n, rows, s.k, &alpha,
                              weights[static_cast<size_t>(c)], CUDA_R_16F, s.k, x, CUDA_R_16F, s.k,
                              &beta, y, out_type, s.n, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
        });
        cublasLtMatmulDesc_t desc;
        CHECK_CUBLAS(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        const cublasOperation_t op_t = CUBLAS_OP_T;
        CHECK_CUBLAS(
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof(op_t)));
        cublasLtMatrixLayout_t a_layout, b_layout, c_layout;
        CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&a_layout, CUDA_R_16F, s.k, s.n, s.k));
        CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&b_layout, CUDA_R_16F, s.k, rows, s.k));
        CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&c_layout, out_type, s.n, rows, s.n));
        cublasLtMatmulPreference_t pref;
        CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
        const size_t ws = kWorkspaceBytes;
        CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
        std::vector<cublasLtMatmulHeuristicResult_t> found(static_cast<size_t>(max_algos));
        int n_found = 0;
        CHECK_CUBLAS(cublasLtMatmulAlgoGetHeuristic(lt, desc, a_layout, b_layout, c_layout,
                                                    c_layout, pref, max_algos, found.data(),
                                                    &n_found));
        float best = -1.0f;
        for (int a = 0; a < n_found; ++a) {
          const float t = time_us(reps, copies, stream, [&](int c) {
            return cublasLtMatmul(lt, desc, &alpha, weights[static_cast<size_t>(c)], a_layout, x,
                                  b_layout, &beta, y, c_layout, y, c_layout,
                                  &found[static_cast<size_t>(a)].algo, workspace, kWorkspaceBytes,
                                  stream) == CUBLAS_STATUS_SUCCESS;
          });
          if (t > 0.0f && (best < 0.0f || t < best)) best = t;
        }
        char line[320];
        std::snprintf(line, sizeof(line),
                      "| %s | %d x %d | %d | %s | %.1f | %.0f | %.1f | %.0f | %.2fx | %d |\n",
                      s.name, s.n, s.k, rows, half_out ? "f16" : "f32", base, flop / base / 1e6,
                      best, flop / best / 1e6, base / best, n_found);
        std::printf("%s", line);
        std::fflush(stdout);
        table += line;
        cublasLtMatmulPreferenceDestroy(pref);
        cublasLtMatrixLayoutDestroy(a_layout);
        cublasLtMatrixLayoutDestroy(b_layout);
        cublasLtMatrixLayoutDestroy(c_layout);
        cublasLtMatmulDescDestroy(desc);
      }
    }
  }
  if (markdown != nullptr) {
    if (FILE* f = std::fopen(markdown, "w")) {
      std::fputs(table.c_str(), f);
      std::fclose(f);
    }
  }
  return 0;
}
