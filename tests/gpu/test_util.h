// Helpers of the GPU kernel tests: device arrays, a device check, random data and CPU
// reference pieces shared by the test files.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/act_quant.h"
#include "backend/cuda/device_matrix.h"
#include "backend/cuda/elementwise.h"
#include "core/status.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "quant/types.h"

namespace llamaserve {
// Test names and failure messages show "Q4_K", not the enum's bytes.
inline void PrintTo(TensorType type, std::ostream* os) { *os << type_name(type); }
}  // namespace llamaserve

namespace llamaserve::cuda::testing {

#ifdef LLAMASERVE_SOURCE_DIR
// The source tree: LLAMASERVE_SOURCE_DIR from the environment when set (the GPU machine runs
// the binaries in a copy of the tree at another path), else where the build saw it.
inline std::filesystem::path source_dir() {
  const char* env = std::getenv("LLAMASERVE_SOURCE_DIR");
  return env != nullptr ? std::filesystem::path(env) : std::filesystem::path(LLAMASERVE_SOURCE_DIR);
}

// The LLaMA 2 vocabulary synth copies: in LLAMASERVE_FIXTURES_DIR from the environment when
// set (the GPU machine's carried copy), else in the source tree's tests/fixtures.
inline std::string vocab_path() {
  const char* env = std::getenv("LLAMASERVE_FIXTURES_DIR");
  const std::filesystem::path dir =
      env != nullptr ? std::filesystem::path(env) : source_dir() / "tests" / "fixtures";
  return (dir / "vocab-llama2-spm.gguf").string();
}
#endif

#define ASSERT_OK(expr)                        \
  do {                                         \
    const ::llamaserve::Status s_ = (expr);    \
    ASSERT_TRUE(s_.is_ok()) << s_.to_string(); \
  } while (0)

#define ASSERT_CUDA(expr)                                                  \
  do {                                                                     \
    const cudaError_t e_ = (expr);                                         \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_); \
  } while (0)

inline bool have_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

inline int device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

// Fixtures of tests across devices: skip below two.
class TwoGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (device_count() < 2)
      GTEST_SKIP() << "needs 2 CUDA devices, " << device_count() << " visible";
  }
};

// Every test fixture: skips without a device (fails instead when LLAMASERVE_REQUIRE_GPU is
// set, as on the GPU machine), and checks that no kernel left an error.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (have_device()) return;
    if (std::getenv("LLAMASERVE_REQUIRE_GPU") != nullptr) FAIL() << "no CUDA device";
    GTEST_SKIP() << "no CUDA device";
  }
  void TearDown() override {
    if (!have_device()) return;
    const cudaError_t e = cudaDeviceSynchronize();
    EXPECT_EQ(e, cudaSuccess) << "pending device error: " << cudaGetErrorString(e);
  }
};

// A device array that frees itself.
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(size_t n) : n_(n) {
    void* p = nullptr;
    if (cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)) == cudaSuccess)
      ptr_ = static_cast<T*>(p);
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    if (ptr_ != nullptr && !host.empty()) {
      cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
    }
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& o) noexcept : ptr_(o.ptr_), n_(o.n_) { o.ptr_ = nullptr; }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(n_, o.n_);
    return *this;
  }
  ~DeviceArray() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }

  T* get() const { return ptr_; }
  size_t size() const { return n_; }
  // All bytes 0xff: NaN for floats, -1 for ints, so that an element a kernel forgot to
  // write fails the comparison.
  void poison() { cudaMemset(ptr_, 0xff, n_ * sizeof(T)); }
  void upload(const std::vector<T>& host) {
    cudaMemcpy(ptr_, host.data(), std::min(host.size(), n_) * sizeof(T), cudaMemcpyHostToDevice);
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
    return host;
  }

 private:
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

inline std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// A rows × cols matrix of `type`: the GGUF bytes and the values they decode to (the
// reference every kernel is compared with).
struct HostMatrix {
  TensorType type;
  int64_t rows;
  int64_t cols;
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // dequantize_row of each row
};

inline HostMatrix make_matrix(TensorType type, int64_t rows, int64_t cols, uint32_t seed) {
  HostMatrix m{type, rows, cols, {}, {}};
  const std::vector<float> src = random_floats(static_cast<size_t>(rows * cols), seed);
  const size_t rb = row_bytes(type, static_cast<size_t>(cols));
  m.bytes.resize(rb * rows);
  m.values.resize(src.size());
  for (int64_t r = 0; r < rows; ++r) {
    const Status q = quantize_row(type, src.data() + r * cols, m.bytes.data() + r * rb, cols);
    const Status d =
        dequantize_row(type, m.bytes.data() + r * rb, m.values.data() + r * cols, cols);
    if (!q.is_ok() || !d.is_ok()) ADD_FAILURE() << q.to_string() << " " << d.to_string();
  }
  return m;
}

// A matrix uploaded in the device layout; owns its memory.
struct UploadedMatrix {
  DeviceArray<uint8_t> storage;
  DeviceMatrix view;
};

inline UploadedMatrix upload(const HostMatrix& m) {
  UploadedMatrix u;
  Result<DeviceMatrixLayout> layout = device_matrix_layout(m.type, m.rows, m.cols);
  if (!layout.is_ok()) {
    ADD_FAILURE() << layout.status().to_string();
    return u;
  }
  u.storage = DeviceArray<uint8_t>(layout->total_bytes());
  // A small staging buffer, so that the upload goes through several steps.
  DeviceArray<uint8_t> staging(row_bytes(m.type, static_cast<size_t>(m.cols)) * 37);
  Result<DeviceMatrix> view = upload_matrix(m.type, m.rows, m.cols, m.bytes.data(), u.storage.get(),
                                            staging.get(), staging.size(), nullptr);
  if (!view.is_ok()) {
    ADD_FAILURE() << view.status().to_string();
    return u;
  }
  u.view = *view;
  return u;
}

// The smallest multiple of the type's block (and of 8 for the float types) >= n.
inline int64_t round_cols(TensorType type, int64_t n) {
  const int64_t block = std::max<int64_t>(traits(type).block_elems, 8);
  return (n + block - 1) / block * block;
}

inline const std::vector<TensorType>& weight_types() {
  static const std::vector<TensorType> kTypes = {
      TensorType::F32,  TensorType::F16,  TensorType::BF16, TensorType::Q8_0, TensorType::Q4_0,
      TensorType::Q4_1, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K};
  return kTypes;
}

// Compares the 8-bit blocks in `storage` (seen through `view`) with the host reference
// quantization of x's n_rows rows of n; reports up to five differences and returns their count.
inline int count_q8_mismatches(const std::vector<float>& x, int64_t x_stride, int64_t n_rows,
                               int64_t n, const DeviceArray<uint8_t>& storage, const Q8Rows& view) {
  const std::vector<uint8_t> bytes = storage.download();
  const auto* qs = reinterpret_cast<const int8_t*>(bytes.data());
  const auto* ds = reinterpret_cast<const float4*>(
      bytes.data() + (reinterpret_cast<const uint8_t*>(view.ds) - storage.get()));
  std::vector<int8_t> want_qs(static_cast<size_t>(n));
  std::vector<float4> want_ds(static_cast<size_t>(n / kQ8Block));
  int mismatches = 0;
  for (int64_t r = 0; r < n_rows; ++r) {
    quantize_q8_reference(x.data() + r * x_stride, n, want_qs.data(), want_ds.data());
    for (int64_t c = 0; c < n; ++c) {
      const int8_t got = qs[r * view.qs_stride + c];
      if (got != want_qs[c] && ++mismatches <= 5) {
        ADD_FAILURE() << "code [" << r << "][" << c << "] is " << int{got} << ", reference "
                      << int{want_qs[c]};
      }
    }
    for (int64_t k = 0; k < n / kQ8Block; ++k) {
      const float4 g = ds[r * view.ds_stride + k], w = want_ds[k];
      if ((g.x != w.x || g.y != w.y || g.z != w.z || g.w != w.w) && ++mismatches <= 5) {
        ADD_FAILURE() << "block [" << r << "][" << k << "]: {" << g.x << ", " << g.y << ", " << g.z
                      << ", " << g.w << "}, reference {" << w.x << ", " << w.y << ", " << w.z
                      << ", " << w.w << "}";
      }
    }
  }
  return mismatches;
}

// Elements of `h` (rows of halves of `type`) that are not the conversion of x's (convert_to_half:
// f16 saturated to ±65504, bf16 rounded to nearest even); reports up to five and returns their
// count.
inline int count_half_mismatches(const std::vector<float>& x, int64_t x_stride, int64_t rows,
                                 int64_t n, const std::vector<uint16_t>& h, int64_t h_stride,
                                 HalfType type) {
  int mismatches = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      const float v = x[r * x_stride + c];
      const uint16_t want = type == HalfType::kF16
                                ? float_to_half(std::clamp(v, -65504.0f, 65504.0f)).bits
                                : float_to_bf16(v).bits;
      if (h[r * h_stride + c] != want && ++mismatches <= 5) {
        ADD_FAILURE() << "half [" << r << "][" << c << "] is 0x" << std::hex << h[r * h_stride + c]
                      << ", want 0x" << want << std::dec << " (" << v << ")";
      }
    }
  }
  return mismatches;
}

inline std::string type_param_name(const ::testing::TestParamInfo<TensorType>& info) {
  return type_name(info.param);
}

// max |a - b| over rows of n_vocab, relative to each row's largest |b|; NaN in `a` counts as
// infinitely wrong.
inline double max_rel_error(const std::vector<float>& a, const std::vector<float>& b,
                            int64_t n_vocab) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0.0;
  for (size_t row = 0; row * n_vocab < b.size(); ++row) {
    double scale = 0.0, err = 0.0;
    for (int64_t i = 0; i < n_vocab; ++i) {
      const size_t k = row * n_vocab + i;
      scale = std::max(scale, std::fabs(static_cast<double>(b[k])));
      err =
          std::max(err, std::isnan(a[k]) ? INFINITY : std::fabs(static_cast<double>(a[k]) - b[k]));
    }
    worst = std::max(worst, err / scale);
  }
  return worst;
}

}  // namespace llamaserve::cuda::testing
