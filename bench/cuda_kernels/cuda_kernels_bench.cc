// Times the decode matvec of every weight type at LLaMA-7B shapes, prefill attention (both
// kernels, f16 and Q8_0 caches), decode attention (both caches), a prompt chunk beside decodes
// after up to 8k positions and the prefill GEMM path, and prints achieved bandwidth against a
// device-to-device copy measured here (FLOP/s for attention and GEMMs). The attention cases
// are in attention_cases.cc, the shared timing and buffer helpers in bench_util.h.
//
// Weights rotate through enough copies to exceed the L2 cache several times, so every launch
// streams from HBM as in a real forward pass. Each figure is the median over groups of
// launches timed with CUDA events. Weight contents are random bytes: the kernels' speed does
// not depend on the values.
//
// Usage: cuda_kernels_bench [--quick] [--no-pdl] [--only TABLE,...] [--csv FILE] [--markdown FILE]
// (tables: matvec, parts, quantize, prefill-attention, decode-attention, geometry, grouped,
// chunk, waves, gemm; all by default)
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "attention_cases.h"
#include "backend/cuda/act_quant.h"
#include "backend/cuda/bandwidth.h"
#include "backend/cuda/device_matrix.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/launch.h"
#include "backend/cuda/matvec.h"
#include "backend/cuda/quant_mma.h"
#include "bench_util.h"

namespace llamaserve::cuda {
namespace {

using namespace kernel_bench;  // NOLINT: the benchmark's own helpers and attention cases

struct Options {
  bool quick = false;
  bool pdl = true;  // programmatic dependent launch (--no-pdl: plain launches)
  std::string csv;
  std::string markdown;
  std::vector<std::string> only;  // the tables to run; empty: all
  bool wants(const std::string& table) const {
    return only.empty() || std::find(only.begin(), only.end(), table) != only.end();
  }
};

// Bytes read + written per second by a device-to-device copy of 4 GiB (as llamaserve bench
// measures it).
double copy_bandwidth() {
  Result<double> bps = measure_copy_bandwidth(0, 4ull << 30, 10);
  BENCH_OK(bps.status());
  return *bps;
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

// quant_mma's grid in waves: Q4_K weights of 4096 columns with as many 32-row CTAs as 1 to 6
// waves of one CTA an SM hold, and the 7B shapes between (Q and K, Q/K/V, gate/up), at 16 and
// 64 activation rows. A launch whose last wave is partly empty costs about what a full one
// does: a CTA's time is one chain of latencies more than its bytes
// (bench/results/2026-12-04-h200-quant-mma-waves.md).
std::string bench_quant_mma_waves(int sms, size_t rotate_bytes, int groups, double copy, FILE* csv,
                                  cudaStream_t stream) {
  constexpr int64_t kCols = 4096, kMaxRows = 64;
  std::printf("\nquant_mma grid waves (Q4_K x %lld columns, 32-row CTAs, %d SMs)\n",
              static_cast<long long>(kCols), sms);
  std::string table =
      "\n| quant_mma waves | rows | CTAs / SMs | N=16 us | %copy | N=64 us | %copy |\n"
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  std::vector<int64_t> rows_list;
  for (int64_t k = 1; k <= 6; ++k) rows_list.push_back(32 * sms * k);
  for (int64_t rows : {int64_t{8192}, int64_t{12288}, int64_t{22016}}) rows_list.push_back(rows);
  std::sort(rows_list.begin(), rows_list.end());
  void* x_half = nullptr;
  float* y = device_floats(kMaxRows * rows_list.back());
  BENCH_CHECK(cudaMalloc(&x_half, kMaxRows * kCols * 2));
  BENCH_CHECK(cudaMemset(x_half, 0, kMaxRows * kCols * 2));
  for (int64_t rows : rows_list) {
    RotatingWeights w;
    make_weights(TensorType::Q4_K, rows, kCols, rotate_bytes, w);
    const double bytes = static_cast<double>(matvec_weight_bytes(w.views[0]));
    std::string line = fmt::format("| Q4_K | {} | {:.2f} |", rows, rows / 32.0 / sms);
    QuantMmaArgs a;
    a.x_half = x_half;
    a.x_stride = kCols;
    a.y = y;
    a.y_stride = rows;
    for (int n : {16, 64}) {
      a.n_rows = n;
      const double s = time_launches(
          [&](int i) {
            a.w = w.views[i % w.views.size()];
            BENCH_OK(quant_mma(a, stream));
          },
          groups, 10, stream);
      line += fmt::format(" {:.2f} | {:.1f}% |", s * 1e6, 100.0 * bytes / s / copy);
      if (csv != nullptr) {
        std::fprintf(csv, "quant_mma_waves,Q4_K,%lld,%lld,%d,%.3f,%.1f,%.1f,\n",
                     static_cast<long long>(rows), static_cast<long long>(kCols), n, s * 1e6,
                     bytes / s / 1e9, 100.0 * bytes / s / copy);
      }
    }
    std::printf("%s\n", line.c_str());
    table += line + "\n";
  }
  BENCH_CHECK(cudaFree(x_half));
  BENCH_CHECK(cudaFree(y));
  return table;
}

int run(const Options& options) {
  cudaDeviceProp prop;
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, %.1f GiB, L2 %.1f MiB\n", prop.name, prop.multiProcessorCount,
              prop.totalGlobalMem / 1073741824.0, prop.l2CacheSize / 1048576.0);
  const double copy = copy_bandwidth();
  // Launches go to a created stream, as in the executor: consecutive kernels overlap through
  // programmatic dependent launch unless --no-pdl.
  cudaStream_t created = nullptr;
  BENCH_CHECK(cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking));
  const LaunchStream stream(created, options.pdl);
  BENCH_OK(configure_gemm_kernels());
  const std::string intro = fmt::format(
      "{}, {} SMs; device-to-device copy {:.1f} GB/s (read + write, 4 GiB); weights rotate "
      "through {:.0f} MiB; median of groups of launches on one stream, programmatic dependent "
      "launch {}",
      prop.name, prop.multiProcessorCount, copy / 1e9,
      std::max<size_t>(4ull * prop.l2CacheSize, 256ull << 20) / 1048576.0,
      options.pdl ? "on" : "off");
  std::printf("%s\n\n", intro.c_str());
  FILE* csv = options.csv.empty() ? nullptr : std::fopen(options.csv.c_str(), "w");
  if (csv != nullptr)
    std::fprintf(csv, "kernel,type,rows,cols,act_rows,us,weight_gbps,pct_copy,tflops\n");

  const size_t rotate_bytes = std::max<size_t>(4ull * prop.l2CacheSize, 256ull << 20);
  const std::vector<TensorType> types = {TensorType::F16,  TensorType::BF16, TensorType::Q8_0,
                                         TensorType::Q4_0, TensorType::Q4_1, TensorType::Q4_K,
                                         TensorType::Q5_K, TensorType::Q6_K, TensorType::F32};
  // One GPU's output, gate/up and down projections, then a tp=2 rank's output and down
  // projections (half the columns; 5504 is no multiple of a K-quant's 256, skipped for those).
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {4096, 4096}, {11008, 4096}, {4096, 11008}, {4096, 2048}, {4096, 5504}};
  const std::vector<int> act_rows =
      options.quick ? std::vector<int>{1} : std::vector<int>{1, 2, 4, 8};
  const int groups = options.quick ? 5 : 15, per_group = 10;

  // Activations: 16 rows of the widest input, as floats and as 8-bit blocks (quantized once;
  // the quantization is timed on its own below, since the forward pass fuses it into the
  // producer of each matvec input).
  constexpr int64_t kMaxCols = 11008, kMaxAct = 16;
  float* x = device_floats(kMaxAct * kMaxCols);
  float* y = device_floats(kMaxAct * kMaxCols * kMaxMatvecParts);
  BENCH_CHECK(cudaMemset(x, 0, kMaxAct * kMaxCols * sizeof(float)));
  void* q8_storage = nullptr;
  BENCH_CHECK(cudaMalloc(&q8_storage, q8_rows_bytes(kMaxAct, kMaxCols)));
  const Q8Rows xq = q8_rows_view(q8_storage, kMaxAct, kMaxCols);
  BENCH_OK(quantize_q8(x, kMaxCols, kMaxAct, kMaxCols, xq, stream));
  auto args_for = [&](const DeviceMatrix& w, int n_act, float* out) {
    MatvecArgs a;
    a.w = w;
    a.x = x;
    a.x_stride = kMaxCols;
    a.xq = xq;
    a.n_rows = n_act;
    a.y = out;
    a.y_stride = w.rows;
    return a;
  };

  std::string table;
  if (options.wants("matvec")) {
    std::printf(
        "matvec (decode): per weight type and shape, us and %% of the copy bandwidth for "
        "1, 2, 4, 8 activation rows (weights read once per launch)\n");
    std::string header = "| type | rows x cols | MB |";
    std::string rule = "| --- | --- | ---: |";
    for (int b : act_rows) {
      header += fmt::format(" N={} us | N={} %copy |", b, b);
      rule += " ---: | ---: |";
    }
    table += header + "\n" + rule + "\n";
    for (TensorType type : types) {
      for (auto [rows, cols] : shapes) {
        if (cols % traits(type).block_elems != 0) continue;
        RotatingWeights w;
        make_weights(type, rows, cols, rotate_bytes, w);
        const double bytes = static_cast<double>(matvec_weight_bytes(w.views[0]));
        std::string line =
            fmt::format("| {} | {} x {} | {:.1f} |", type_name(type), rows, cols, bytes / 1e6);
        for (int b : act_rows) {
          const double s = time_launches(
              [&](int i) { BENCH_OK(matvec(args_for(w.views[i % w.views.size()], b, y), stream)); },
              groups, per_group, stream);
          const double pct = 100.0 * bytes / s / copy;
          line += fmt::format(" {:.2f} | {:.1f}% |", s * 1e6, pct);
          if (csv != nullptr) {
            std::fprintf(csv, "matvec,%s,%lld,%lld,%d,%.3f,%.1f,%.1f,\n", type_name(type),
                         static_cast<long long>(rows), static_cast<long long>(cols), b, s * 1e6,
                         bytes / s / 1e9, pct);
          }
        }
        std::printf("%s\n", line.c_str());
        table += line + "\n";
      }
    }
  }
  // One launch for several matrices sharing the input (7B: Q, K, V; gate and up) against one
  // launch each: what the fusion saves in launch gaps and grid tails.
  if (options.wants("parts")) {
    std::printf("\nmatvec parts, batch 1: one launch vs one launch per matrix\n");
    table += "\n| type | parts | MB | one launch us | %copy | separate us | %copy |\n";
    table += "| --- | --- | ---: | ---: | ---: | ---: | ---: |\n";
    for (TensorType type : {TensorType::F16, TensorType::Q8_0, TensorType::Q4_K}) {
      for (const auto& [label, rows, n_parts] :
           {std::tuple<const char*, int64_t, int>{"QKV 3 x 4096 x 4096", 4096, 3},
            std::tuple<const char*, int64_t, int>{"gate+up 2 x 11008 x 4096", 11008, 2}}) {
        std::vector<RotatingWeights> mats(static_cast<size_t>(n_parts));
        double bytes = 0;
        for (auto& m : mats) {
          make_weights(type, rows, 4096, rotate_bytes / n_parts, m);
          bytes += static_cast<double>(matvec_weight_bytes(m.views[0]));
        }
        auto parts_at = [&](int i) {
          std::vector<MatvecArgs> parts;
          for (int p = 0; p < n_parts; ++p) {
            const auto& views = mats[static_cast<size_t>(p)].views;
            parts.push_back(args_for(views[i % views.size()], 1, y + p * kMaxCols));
          }
          return parts;
        };
        const double fused = time_launches(
            [&](int i) { BENCH_OK(matvec_parts(parts_at(i), stream)); }, groups, per_group, stream);
        const double separate = time_launches(
            [&](int i) {
              for (const MatvecArgs& a : parts_at(i)) BENCH_OK(matvec(a, stream));
            },
            groups, per_group, stream);
        const std::string line = fmt::format(
            "| {} | {} | {:.1f} | {:.2f} | {:.1f}% | {:.2f} | {:.1f}% |", type_name(type), label,
            bytes / 1e6, fused * 1e6, 100.0 * bytes / fused / copy, separate * 1e6,
            100.0 * bytes / separate / copy);
        std::printf("%s\n", line.c_str());
        table += line + "\n";
      }
    }
  }
  if (options.wants("quantize")) {
    std::printf("\nquantize_q8 (activations to 8-bit blocks, standalone)\n");
    table += "\n| quantize_q8 | rows x cols | us |\n| --- | --- | ---: |\n";
    for (int64_t cols : {int64_t{4096}, int64_t{11008}}) {
      for (int rows : {1, 8}) {
        const double s =
            time_launches([&](int) { BENCH_OK(quantize_q8(x, kMaxCols, rows, cols, xq, stream)); },
                          groups, per_group, stream);
        const std::string line = fmt::format("| | {} x {} | {:.2f} |", rows, cols, s * 1e6);
        std::printf("%s\n", line.c_str());
        table += line + "\n";
      }
    }
  }
  BENCH_CHECK(cudaFree(q8_storage));

  if (options.wants("prefill-attention")) table += bench_prefill_attention(groups, csv, stream);
  if (options.wants("decode-attention")) table += bench_decode_attention(groups, copy, csv, stream);
  if (options.wants("geometry"))
    table += bench_decode_attention_geometry(groups, copy, csv, stream);
  if (options.wants("grouped")) table += bench_decode_attention_grouped(groups, copy, csv, stream);
  if (options.wants("chunk")) table += bench_chunk_attention(groups, csv, stream);
  if (options.wants("waves")) {
    table +=
        bench_quant_mma_waves(prop.multiProcessorCount, rotate_bytes, groups, copy, csv, stream);
  }

  if (options.wants("gemm")) {
    std::printf("\ngemm (prefill, cuBLAS; quantized weights dequantized to f16 per call)\n");
    table += "\n| gemm | rows x cols | N | us | TFLOP/s |\n| --- | --- | ---: | ---: | ---: |\n";
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
    for (TensorType type : {TensorType::F16, TensorType::BF16, TensorType::Q8_0, TensorType::Q4_K,
                            TensorType::Q6_K}) {
      for (auto [rows, cols] : shapes) {
        if (cols % traits(type).block_elems != 0) continue;
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
                BENCH_OK(gemm(handle, g, ws, stream));
              },
              options.quick ? 3 : 7, 5, stream);
          const double tflops = 2.0 * rows * cols * n / s / 1e12;
          const std::string line = fmt::format("| {} | {} x {} | {} | {:.2f} | {:.1f} |",
                                               type_name(type), rows, cols, n, s * 1e6, tflops);
          std::printf("%s\n", line.c_str());
          table += line + "\n";
          if (csv != nullptr) {
            std::fprintf(csv, "gemm,%s,%lld,%lld,%d,%.3f,,,%.2f\n", type_name(type),
                         static_cast<long long>(rows), static_cast<long long>(cols), n, s * 1e6,
                         tflops);
          }
        }
      }
    }
    cublasDestroy(handle);
    BENCH_CHECK(cudaFree(gx));
    BENCH_CHECK(cudaFree(gy));
    BENCH_CHECK(cudaFree(act));
    BENCH_CHECK(cudaFree(scratch));
  }
  BENCH_CHECK(cudaStreamDestroy(created));
  BENCH_CHECK(cudaFree(x));
  BENCH_CHECK(cudaFree(y));
  if (csv != nullptr) std::fclose(csv);
  if (!options.markdown.empty()) {
    FILE* md = std::fopen(options.markdown.c_str(), "w");
    if (md == nullptr) {
      std::fprintf(stderr, "cannot write %s\n", options.markdown.c_str());
      return 1;
    }
    std::fprintf(md, "%s\n\n%s", intro.c_str(), table.c_str());
    std::fclose(md);
  }
  return 0;
}

}  // namespace
}  // namespace llamaserve::cuda

int main(int argc, char** argv) {
  llamaserve::cuda::Options options;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      options.quick = true;
    } else if (std::strcmp(argv[i], "--no-pdl") == 0) {
      options.pdl = false;
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      for (std::string_view rest = argv[++i]; !rest.empty();) {
        const size_t comma = std::min(rest.find(','), rest.size());
        options.only.emplace_back(rest.substr(0, comma));
        rest.remove_prefix(std::min(comma + 1, rest.size()));
      }
    } else if (std::strcmp(argv[i], "--csv") == 0 && i + 1 < argc) {
      options.csv = argv[++i];
    } else if (std::strcmp(argv[i], "--markdown") == 0 && i + 1 < argc) {
      options.markdown = argv[++i];
    } else {
      std::fprintf(
          stderr,
          "usage: %s [--quick] [--no-pdl] [--only TABLE,...] [--csv FILE] [--markdown FILE]\n",
          argv[0]);
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
