// The GEMM (gemm.h) against the double reference for every weight type, on both of its paths:
// quantized weights dequantized for cuBLAS and multiplied on quant_mma.h's kernel; accumulate
// and bias, half outputs and SwiGLU's halves. Outputs are poisoned with NaN before each run.
#include <cublas_v2.h>

#include <string>
#include <vector>

#include "backend/cuda/elementwise.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/quant_mma.h"
#include "product_reference.h"
#include "test_util.h"

namespace llamaserve::cuda::testing {
namespace {

class GemmTest : public GpuTest, public ::testing::WithParamInterface<TensorType> {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    ASSERT_OK(configure_gemm_kernels());
    ASSERT_EQ(cublasCreate(&handle_), CUBLAS_STATUS_SUCCESS);
  }
  void TearDown() override {
    if (handle_ != nullptr) cublasDestroy(handle_);
    GpuTest::TearDown();
  }
  cublasHandle_t handle_ = nullptr;
};

// Activations are rounded to f16 (bf16 for BF16 weights) and quantized weights are
// dequantized to f16: each product carries up to two roundings, 2 * 2^-11 (2 * 2^-8) of
// |w x| in the worst case.
double gemm_tolerance(TensorType type) { return type == TensorType::BF16 ? 1e-2 : 1.5e-3; }

// The paths a GEMM of `type` weights can take: quantized weights through the f16 copy and
// cuBLAS (quant_mma_rows 0) and through quant_mma.h's kernel (every row count).
std::vector<int> quant_mma_settings(TensorType type) {
  if (!quant_mma_supported(type)) return {kDefaultQuantMmaRows};
  return {0, 4096};
}

GemmArgs gemm_args(const DeviceMatrix& w, const float* x, int64_t x_stride, int64_t n_rows,
                   float* y, int64_t y_stride) {
  GemmArgs args;
  args.w = w;
  args.x = x;
  args.x_stride = x_stride;
  args.n_rows = n_rows;
  args.y = y;
  args.y_stride = y_stride;
  return args;
}

// Runs `check` once on each path a GEMM of `type` weights can take (setting
// args.quant_mma_rows), then restores the default.
template <class Check>
void for_each_gemm_path(TensorType type, GemmArgs& args, Check&& check) {
  for (const int rows : quant_mma_settings(type)) {
    SCOPED_TRACE(rows == 0 ? std::string("weights dequantized for cuBLAS")
                           : "quant_mma up to " + std::to_string(rows) + " rows");
    args.quant_mma_rows = rows;
    check();
  }
  args.quant_mma_rows = kDefaultQuantMmaRows;
}

TEST_P(GemmTest, MatchesReference) {
  const TensorType type = GetParam();
  const int64_t cols = round_cols(type, kCols);
  const int64_t n_act = 37;
  const HostMatrix m = make_matrix(type, kRows, cols, 2468);
  UploadedMatrix w = upload(m);
  ASSERT_NE(w.view.quants, nullptr);
  const int64_t x_stride = cols + 4;
  const int64_t y_stride = kRows + 5;
  const std::vector<float> x = random_floats(n_act * x_stride, 13);
  DeviceArray<float> x_dev(x);
  DeviceArray<float> y_dev(n_act * y_stride);
  y_dev.poison();
  DeviceArray<uint8_t> act_half(gemm_act_half_bytes(n_act, cols));
  // Room for 100 dequantized rows: the 769 rows go through 8 slices.
  DeviceArray<uint8_t> weight_half(100 * ((cols + 7) / 8 * 8) * 2);
  GemmWorkspace ws{act_half.get(), act_half.size(), weight_half.get(), weight_half.size()};
  GemmArgs args = gemm_args(w.view, x_dev.get(), x_stride, n_act, y_dev.get(), y_stride);
  const Reference want = reference_product(m, x, x_stride, n_act);
  for_each_gemm_path(type, args, [&] {
    y_dev.poison();
    ASSERT_OK(gemm(handle_, args, ws, nullptr));
    ASSERT_CUDA(cudaDeviceSynchronize());
    expect_close(y_dev.download(), y_stride, want, kRows, n_act, gemm_tolerance(type));
  });
}

// Quantized weights on quant_mma.h's kernel: every pass width (1 to 8 tiles of 8 activation
// rows, several passes), rows that end inside a CTA's 32, and rows of 33 and 35 blocks, whose
// last step holds one or three units of the 32-element block types (two of Q8_0's).
TEST_P(GemmTest, QuantMmaMatchesReferenceForEveryRowCount) {
  const TensorType type = GetParam();
  if (!quant_mma_supported(type)) GTEST_SKIP() << "float weights go to cuBLAS as they are";
  for (const int64_t extra_blocks : {1, 3}) {
    const int64_t cols = round_cols(type, 1000) + extra_blocks * traits(type).block_elems;
    const int64_t rows = 203;
    const HostMatrix m = make_matrix(type, rows, cols, 97);
    UploadedMatrix w = upload(m);
    ASSERT_NE(w.view.quants, nullptr);
    for (const int64_t n_act : {1, 7, 8, 9, 16, 17, 25, 32, 33, 41, 57, 64, 70, 130}) {
      SCOPED_TRACE("activation rows " + std::to_string(n_act) + ", columns " +
                   std::to_string(cols));
      const int64_t x_stride = cols + 12;
      const int64_t y_stride = rows + 1;
      const std::vector<float> x = random_floats(n_act * x_stride, 100 + n_act);
      DeviceArray<float> x_dev(x);
      DeviceArray<float> y_dev(n_act * y_stride);
      y_dev.poison();
      DeviceArray<uint8_t> act_half(gemm_act_half_bytes(n_act, cols));
      GemmWorkspace ws{act_half.get(), act_half.size(), nullptr, 0};
      GemmArgs args = gemm_args(w.view, x_dev.get(), x_stride, n_act, y_dev.get(), y_stride);
      args.quant_mma_rows = 4096;
      ASSERT_OK(gemm(handle_, args, ws, nullptr));
      ASSERT_CUDA(cudaDeviceSynchronize());
      expect_close(y_dev.download(), y_stride, reference_product(m, x, x_stride, n_act), rows,
                   n_act, gemm_tolerance(type));
    }
  }
}

TEST_P(GemmTest, AccumulatesAndAddsBias) {
  const TensorType type = GetParam();
  const int64_t cols = round_cols(type, 640);
  const int64_t rows = 96;
  const int64_t n_act = 20;
  const HostMatrix m = make_matrix(type, rows, cols, 31);
  UploadedMatrix w = upload(m);
  ASSERT_NE(w.view.quants, nullptr);
  const std::vector<float> x = random_floats(n_act * cols, 32);
  const std::vector<float> y0 = random_floats(n_act * rows, 33);
  const std::vector<float> bias = random_floats(rows, 34);
  DeviceArray<float> x_dev(x), y_dev(y0), bias_dev(bias);
  DeviceArray<uint8_t> act_half(gemm_act_half_bytes(n_act, cols));
  DeviceArray<uint8_t> weight_half(rows * cols * 2);
  GemmWorkspace ws{act_half.get(), act_half.size(), weight_half.get(), weight_half.size()};
  GemmArgs args = gemm_args(w.view, x_dev.get(), cols, n_act, y_dev.get(), rows);
  args.bias = bias_dev.get();
  args.accumulate = true;
  std::vector<double> extra(n_act * rows);
  for (int64_t b = 0; b < n_act; ++b) {
    for (int64_t r = 0; r < rows; ++r) extra[b * rows + r] = y0[b * rows + r] + bias[r];
  }
  const Reference want = reference_product(m, x, cols, n_act);
  for_each_gemm_path(type, args, [&] {
    y_dev.upload(y0);
    ASSERT_OK(gemm(handle_, args, ws, nullptr));
    ASSERT_CUDA(cudaDeviceSynchronize());
    expect_close(y_dev.download(), rows, want, rows, n_act, gemm_tolerance(type), extra);
  });
}

// A tensor-parallel partial as halves (GemmArgs::y_half): the product rounded once more, to
// f16 (bf16 for BF16 weights), 2^-11 (2^-8) of |w x| at most.
TEST_P(GemmTest, WritesHalfOutput) {
  const TensorType type = GetParam();
  const int64_t cols = round_cols(type, 640);
  const int64_t rows = 203, n_act = 19, y_stride = rows + 3;
  const HostMatrix m = make_matrix(type, rows, cols, 41);
  UploadedMatrix w = upload(m);
  ASSERT_NE(w.view.quants, nullptr);
  const std::vector<float> x = random_floats(n_act * cols, 42);
  DeviceArray<float> x_dev(x);
  DeviceArray<uint16_t> y_dev(n_act * y_stride);
  y_dev.poison();
  DeviceArray<uint8_t> act_half(gemm_act_half_bytes(n_act, cols));
  // Room for 64 dequantized rows: the 203 rows go through 4 slices.
  DeviceArray<uint8_t> weight_half(64 * ((cols + 7) / 8 * 8) * 2);
  GemmWorkspace ws{act_half.get(), act_half.size(), weight_half.get(), weight_half.size()};
  GemmArgs args = gemm_args(w.view, x_dev.get(), cols, n_act, nullptr, y_stride);
  args.y_half = y_dev.get();
  const Reference want = reference_product(m, x, cols, n_act);
  for_each_gemm_path(type, args, [&] {
    y_dev.poison();
    ASSERT_OK(gemm(handle_, args, ws, nullptr));
    ASSERT_CUDA(cudaDeviceSynchronize());
    const std::vector<uint16_t> h = y_dev.download();
    std::vector<float> y(h.size());
    for (size_t i = 0; i < h.size(); ++i) {
      y[i] = type == TensorType::BF16 ? bf16_to_float(BF16{h[i]}) : half_to_float(Half{h[i]});
    }
    expect_close(y, y_stride, want, rows, n_act,
                 gemm_tolerance(type) + (type == TensorType::BF16 ? 4e-3 : 5e-4));
  });
  // Halves are a partial alone: no accumulating into them, no bias.
  args.accumulate = true;
  EXPECT_FALSE(gemm(handle_, args, ws, nullptr).is_ok());
}

// SwiGLU output (GemmArgs::swiglu): the rows silu(gate) * up as halves, on quant_mma.h's kernel
// in its epilogue (every pass width, columns that end inside a CTA's 16) and on cuBLAS through
// silu_mul; bit for bit what the product to fp32 and silu_mul to halves give.
TEST_P(GemmTest, WritesSwiGluHalves) {
  const TensorType type = GetParam();
  const int64_t cols = round_cols(type, 640);
  const int64_t n_ff = 101, rows = 2 * n_ff, y_stride = rows + 3, h_stride = n_ff + 5;
  const HostMatrix m = make_matrix(type, rows, cols, 43);
  UploadedMatrix w = upload(m);
  ASSERT_NE(w.view.quants, nullptr);
  const HalfType half = type == TensorType::BF16 ? HalfType::kBF16 : HalfType::kF16;
  for (const int64_t n_act : {1, 9, 16, 33, 64, 70}) {
    SCOPED_TRACE("activation rows " + std::to_string(n_act));
    const std::vector<float> x = random_floats(n_act * cols, 44 + n_act);
    DeviceArray<float> x_dev(x), y_dev(n_act * y_stride);
    DeviceArray<uint16_t> want_dev(n_act * h_stride), got_dev(n_act * h_stride);
    DeviceArray<uint8_t> act_half(gemm_act_half_bytes(n_act, cols));
    DeviceArray<uint8_t> weight_half(64 * ((cols + 7) / 8 * 8) * 2);
    GemmWorkspace ws{act_half.get(), act_half.size(), weight_half.get(), weight_half.size()};
    GemmArgs args = gemm_args(w.view, x_dev.get(), cols, n_act, y_dev.get(), y_stride);
    for_each_gemm_path(type, args, [&] {
      want_dev.poison();
      got_dev.poison();
      args.swiglu = HalfRows{};
      ASSERT_OK(gemm(handle_, args, ws, nullptr));
      ASSERT_OK(silu_mul(y_dev.get(), y_stride, y_dev.get() + n_ff, y_stride, n_act, n_ff, nullptr,
                         0, nullptr, {}, HalfRows{want_dev.get(), h_stride, half}));
      y_dev.poison();
      args.swiglu = HalfRows{got_dev.get(), h_stride, half};
      ASSERT_OK(gemm(handle_, args, ws, nullptr));
      ASSERT_CUDA(cudaDeviceSynchronize());
      const std::vector<uint16_t> want = want_dev.download(), got = got_dev.download();
      int mismatches = 0;
      for (int64_t b = 0; b < n_act; ++b) {
        for (int64_t c = 0; c < n_ff; ++c) {
          const size_t i = static_cast<size_t>(b * h_stride + c);
          if (got[i] != want[i] && ++mismatches <= 5) {
            ADD_FAILURE() << "[" << b << "][" << c << "] is 0x" << std::hex << got[i] << ", want 0x"
                          << want[i];
          }
        }
      }
      EXPECT_EQ(mismatches, 0);
    });
  }
  // SwiGLU's halves take the whole product: no half partial, bias or accumulate beside them.
  DeviceArray<float> x_dev(cols), y_dev(y_stride);
  DeviceArray<uint16_t> h_dev(h_stride);
  GemmArgs args = gemm_args(w.view, x_dev.get(), cols, 1, y_dev.get(), y_stride);
  args.swiglu = HalfRows{h_dev.get(), h_stride, half};
  args.accumulate = true;
  DeviceArray<uint8_t> act_half(gemm_act_half_bytes(1, cols));
  GemmWorkspace ws{act_half.get(), act_half.size(), nullptr, 0};
  EXPECT_FALSE(gemm(handle_, args, ws, nullptr).is_ok());
}

INSTANTIATE_TEST_SUITE_P(AllTypes, GemmTest, ::testing::ValuesIn(weight_types()), type_param_name);

}  // namespace
}  // namespace llamaserve::cuda::testing
