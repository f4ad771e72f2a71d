// Optimized CPU kernels against the reference ones, on random data of awkward sizes. These
// test the AVX2 kernels on every machine; avx512_test.cc compares the AVX-512 ones with them.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "act_rows.h"
#include "backend/cpu/act_quant.h"
#include "backend/cpu/dot.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/packed_weight.h"
#include "backend/cpu/ref_kernels.h"
#include "quant/quant.h"

namespace llamaserve::cpu {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// A weight matrix of `type` quantized from random floats, viewed as a QTensor.
struct TestMatrix {
  std::vector<uint8_t> bytes;
  QTensor tensor;
};

TestMatrix make_matrix(TensorType type, int64_t rows, int64_t cols, uint32_t seed) {
  TestMatrix m;
  const std::vector<float> values = random_floats(static_cast<size_t>(rows * cols), seed, 0.5f);
  const size_t row_size = row_bytes(type, static_cast<size_t>(cols));
  m.bytes.resize(row_size * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_TRUE(
        quantize_row(type, values.data() + r * cols, m.bytes.data() + r * row_size, cols).is_ok());
  }
  m.tensor.name = std::string("test.") + type_name(type);
  m.tensor.type = type;
  m.tensor.shape = {rows, cols};
  m.tensor.data = m.bytes.data();
  m.tensor.n_bytes = m.bytes.size();
  return m;
}

double abs_dot(TensorType type, const void* w, const std::vector<float>& x) {
  std::vector<float> wf(x.size());
  EXPECT_TRUE(dequantize_row(type, w, wf.data(), static_cast<int64_t>(x.size())).is_ok());
  double sum = 0.0;
  for (size_t i = 0; i < x.size(); ++i) sum += std::fabs(static_cast<double>(wf[i]) * x[i]);
  return sum;
}

const TensorType kWeightTypes[] = {TensorType::F32,  TensorType::F16,  TensorType::BF16,
                                   TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1,
                                   TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K};
// The types with row kernels (the others are multiplied packed: PackedTest).
const TensorType kRowTypes[] = {TensorType::F32, TensorType::F16, TensorType::BF16};

// An awkward row length for the type: not a power of two, several blocks, a tail for the
// float types.
int64_t odd_cols(TensorType type) {
  const uint32_t block = traits(type).block_elems;
  return block == 1 ? 333 : block == 32 ? 32 * 23 : 256 * 3;
}

TEST(ActQuant, SimdMatchesScalarReference) {
  const int64_t n = 256 * 5;
  std::vector<float> x = random_floats(static_cast<size_t>(n), 1, 3.0f);
  x[7] = 0.0f;
  std::fill(x.begin() + 256, x.begin() + 512, 0.0f);  // an all-zero block must give d = 0
  std::vector<ActBlockQ8_32> fast32(n / 32), ref32(n / 32);
  quantize_act_row(ActFormat::kQ8_32, x.data(), fast32.data(), n);
  quantize_act_row_q8_32_ref(x.data(), ref32.data(), n);
  for (int64_t b = 0; b < n / 32; ++b) {
    EXPECT_EQ(fast32[b].d, ref32[b].d) << b;
    EXPECT_FLOAT_EQ(fast32[b].sum, ref32[b].sum) << b;
    for (int i = 0; i < 32; ++i) ASSERT_EQ(fast32[b].qs[i], ref32[b].qs[i]) << b << " " << i;
  }
  std::vector<ActBlockQ8_256> fast256(n / 256), ref256(n / 256);
  quantize_act_row(ActFormat::kQ8_256, x.data(), fast256.data(), n);
  quantize_act_row_q8_256_ref(x.data(), ref256.data(), n);
  for (int64_t b = 0; b < n / 256; ++b) {
    EXPECT_EQ(fast256[b].d, ref256[b].d);
    for (int g = 0; g < 16; ++g) EXPECT_EQ(fast256[b].group_sums[g], ref256[b].group_sums[g]);
    for (int i = 0; i < 256; ++i) ASSERT_EQ(fast256[b].qs[i], ref256[b].qs[i]) << b << " " << i;
  }
  EXPECT_EQ(fast256[1].d, 0.0f);
  // Quantization error is at most half a step.
  for (int64_t i = 0; i < n; ++i) {
    const ActBlockQ8_32& blk = fast32[i / 32];
    EXPECT_LE(std::fabs(blk.d * blk.qs[i % 32] - x[i]), blk.d * 0.5f + 1e-6f);
  }
}

class DotTest : public ::testing::TestWithParam<TensorType> {};

// The integer kernels must compute exactly Σ w x for the activation values they were given
// (the dequantized activation blocks), up to float rounding.
TEST_P(DotTest, MatchesReferenceOnQuantizedActivations) {
  const TensorType type = GetParam();
  const MatmulKernel* kernel = find_matmul_kernel(type, KernelIsa::kAvx2);
  ASSERT_NE(kernel, nullptr);
  const int64_t n = odd_cols(type);
  const int64_t rows = 13;
  TestMatrix w = make_matrix(type, rows, n, 42);
  for (uint32_t seed = 0; seed < 4; ++seed) {
    const std::vector<float> x = random_floats(static_cast<size_t>(n), 100 + seed, 2.0f);
    std::vector<uint8_t> act(act_row_bytes(kernel->act_format, n));
    quantize_act_row(kernel->act_format, x.data(), act.data(), n);
    const std::vector<float> x_seen = dequantize_act(kernel->act_format, act.data(), n);
    for (int64_t r = 0; r < rows; ++r) {
      const float fast = kernel->dot(w.tensor.row(r), act.data(), n);
      const float exact = dot_row(type, w.tensor.row(r), x_seen.data(), n);
      const double magnitude = abs_dot(type, w.tensor.row(r), x_seen);
      EXPECT_NEAR(fast, exact, 2e-5 * magnitude + 1e-6) << type_name(type) << " row " << r;
      // Against the float activations: the 8-bit activation error stays well below 1% of
      // the magnitude of the products.
      const float reference = dot_row(type, w.tensor.row(r), x.data(), n);
      EXPECT_NEAR(fast, reference, 1e-2 * magnitude) << type_name(type) << " row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(RowTypes, DotTest, ::testing::ValuesIn(kRowTypes),
                         [](const auto& info) { return std::string(type_name(info.param)); });

class MatmulTest : public ::testing::TestWithParam<TensorType> {};

// Several outputs sharing one input, odd row counts, several tokens, biases, threads.
TEST_P(MatmulTest, MatchesReferenceMatmul) {
  const TensorType type = GetParam();
  const int64_t cols = odd_cols(type);
  const int64_t n_tokens = 5;
  TestMatrix a = make_matrix(type, 37, cols, 7);
  TestMatrix b = make_matrix(type, 11, cols, 8);
  const std::vector<float> bias = random_floats(11, 9);
  const std::vector<float> x = random_floats(static_cast<size_t>(n_tokens * cols), 10);
  ThreadPool pool(3);
  ActCache act(8, cols);
  act.reset(x.data(), n_tokens, cols);
  std::vector<float> ya(n_tokens * 37), yb(n_tokens * 11);
  std::vector<PackedWeight> packed;
  if (PackedWeight::packs(type)) {
    packed.push_back(PackedWeight::pack(a.tensor, pool).value());
    packed.push_back(PackedWeight::pack(b.tensor, pool).value());
  }
  const MatmulOutput outputs[] = {
      {&a.tensor, ya.data(), 37, nullptr, packed.empty() ? nullptr : &packed[0]},
      {&b.tensor, yb.data(), 11, bias.data(), packed.empty() ? nullptr : &packed[1]}};
  matmul(outputs, act, pool, KernelIsa::kAvx2);

  std::vector<float> ra(n_tokens * 37), rb(n_tokens * 11);
  matmul_ref({&a.tensor, ra.data(), 37, nullptr}, x.data(), n_tokens, &pool);
  matmul_ref({&b.tensor, rb.data(), 11, bias.data()}, x.data(), n_tokens, nullptr);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t r = 0; r < 37; ++r) {
      const double magnitude =
          abs_dot(type, a.tensor.row(r),
                  std::vector<float>(x.begin() + t * cols, x.begin() + (t + 1) * cols));
      EXPECT_NEAR(ya[t * 37 + r], ra[t * 37 + r], 1e-2 * magnitude + 1e-5) << t << " " << r;
    }
    for (int64_t r = 0; r < 11; ++r) {
      const double magnitude =
          abs_dot(type, b.tensor.row(r),
                  std::vector<float>(x.begin() + t * cols, x.begin() + (t + 1) * cols));
      EXPECT_NEAR(yb[t * 11 + r], rb[t * 11 + r], 1e-2 * magnitude + 1e-5) << t << " " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MatmulTest, ::testing::ValuesIn(kWeightTypes),
                         [](const auto& info) { return std::string(type_name(info.param)); });

class PackedTest : public ::testing::TestWithParam<TensorType> {};

// Packed tiles (packed_weight.h): every row count's last tile (1, 8, 13 and 37 rows), odd block
// counts, 1..9 tokens (four-token passes and the rest), two outputs sharing the input with a
// bias, three threads. Each result is the exact dot product with the activations the kernel
// saw up to float rounding, and a token's result does not depend on the tokens beside it.
TEST_P(PackedTest, MatchesExactDotsAndIsTheSameForEveryBatch) {
  const TensorType type = GetParam();
  ThreadPool pool(3);
  const std::vector<int64_t> lengths = traits(type).block_elems == 256
                                           ? std::vector<int64_t>{256, 512, 768}
                                           : std::vector<int64_t>{32, 96, 160, 32 * 23};
  for (int64_t cols : lengths) {
    for (int64_t rows : {1, 8, 13, 37}) {
      TestMatrix a = make_matrix(type, rows, cols, static_cast<uint32_t>(rows + cols));
      TestMatrix b = make_matrix(type, 11, cols, 8);
      const PackedWeight pa = PackedWeight::pack(a.tensor, pool).value();
      const PackedWeight pb = PackedWeight::pack(b.tensor, pool).value();
      ASSERT_EQ(pa.n_tiles(), (rows + 7) / 8);
      const std::vector<float> bias = random_floats(11, 9);
      const std::vector<float> x = random_floats(static_cast<size_t>(9 * cols), 10, 2.0f);
      ActCache act(9, cols);
      // Token t alone, for the comparison across batch sizes.
      std::vector<float> alone_a(static_cast<size_t>(9 * rows)), alone_b(9 * 11);
      for (int64_t t = 0; t < 9; ++t) {
        act.reset(x.data() + t * cols, 1, cols);
        const MatmulOutput outputs[] = {{&a.tensor, alone_a.data() + t * rows, rows, nullptr, &pa},
                                        {&b.tensor, alone_b.data() + t * 11, 11, bias.data(), &pb}};
        matmul(outputs, act, pool, KernelIsa::kAvx2);
      }
      for (int64_t n_tokens = 1; n_tokens <= 9; ++n_tokens) {
        act.reset(x.data(), n_tokens, cols);
        std::vector<float> ya(static_cast<size_t>(n_tokens * rows)), yb(n_tokens * 11);
        const MatmulOutput outputs[] = {{&a.tensor, ya.data(), rows, nullptr, &pa},
                                        {&b.tensor, yb.data(), 11, bias.data(), &pb}};
        matmul(outputs, act, pool, KernelIsa::kAvx2);
        const ActFormat format = find_matmul_kernel(type, KernelIsa::kAvx2)->act_format;
        const uint8_t* act_rows = act.rows(format, pool);
        for (int64_t t = 0; t < n_tokens; ++t) {
          const std::vector<float> seen =
              dequantize_act(format, act_rows + t * act_row_bytes(format, cols), cols);
          for (int64_t r = 0; r < rows; ++r) {
            const float exact = dot_row(type, a.tensor.row(r), seen.data(), cols);
            const double magnitude = abs_dot(type, a.tensor.row(r), seen);
            const float got = ya[t * rows + r];
            ASSERT_NEAR(got, exact, 2e-5 * magnitude + 1e-6)
                << type_name(type) << " cols " << cols << " rows " << rows << " token " << t;
            ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(alone_a[t * rows + r]))
                << "token " << t << " of " << n_tokens << ", row " << r;
          }
          for (int64_t r = 0; r < 11; ++r) {
            const float exact = dot_row(type, b.tensor.row(r), seen.data(), cols) + bias[r];
            const double magnitude = abs_dot(type, b.tensor.row(r), seen);
            ASSERT_NEAR(yb[t * 11 + r], exact, 2e-5 * magnitude + 1e-5) << t << " " << r;
            ASSERT_EQ(std::bit_cast<uint32_t>(yb[t * 11 + r]),
                      std::bit_cast<uint32_t>(alone_b[t * 11 + r]));
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Packed, PackedTest,
                         ::testing::Values(TensorType::Q4_0, TensorType::Q4_1, TensorType::Q8_0,
                                           TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K),
                         [](const auto& info) { return std::string(type_name(info.param)); });

TEST(Matmul, UnsupportedTypeFailsLoudly) {
  QTensor t;
  t.name = "blk.0.attn_q.weight";
  t.type = TensorType::Q5_0;
  t.shape = {4, 32};
  const Status status = check_matmul_supported(t);
  EXPECT_EQ(status.code(), StatusCode::kUnsupported);
  EXPECT_NE(status.message().find("Q5_0"), std::string::npos);
  EXPECT_NE(status.message().find("blk.0.attn_q.weight"), std::string::npos);
  EXPECT_EQ(find_matmul_kernel(TensorType::Q2_K, KernelIsa::kAvx2), nullptr);
}

TEST(Ops, Exp256IsAccurate) {
  alignas(32) float in[8], out[8];
  for (float x = -80.0f; x < 80.0f; x += 0.37f) {
    for (int i = 0; i < 8; ++i) in[i] = x + 0.01f * i;
    _mm256_storeu_ps(out, exp256(_mm256_loadu_ps(in)));
    for (int i = 0; i < 8; ++i) {
      const double expected = std::exp(static_cast<double>(in[i]));
      ASSERT_NEAR(out[i], expected, 4e-7 * expected) << in[i];
    }
  }
}

TEST(Ops, RmsNormMatchesReference) {
  for (int64_t n : {1, 7, 64, 333, 576}) {
    const std::vector<float> x = random_floats(static_cast<size_t>(n), 3, 4.0f);
    const std::vector<float> w = random_floats(static_cast<size_t>(n), 4);
    std::vector<float> fast(n), ref(n);
    rmsnorm(x.data(), w.data(), fast.data(), n, 1e-5f);
    ref::rmsnorm(x.data(), w.data(), ref.data(), n, 1e-5f);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_NEAR(fast[i], ref[i], 1e-5f * (1.0f + std::fabs(ref[i]))) << n;
  }
}

TEST(Ops, SiluMulMatchesReference) {
  const int64_t n = 1000 + 3;
  std::vector<float> gate = random_floats(static_cast<size_t>(n), 5, 6.0f);
  gate[0] = -100.0f;  // e^100 must not turn into inf/nan
  gate[1] = 100.0f;
  const std::vector<float> up = random_floats(static_cast<size_t>(n), 6);
  std::vector<float> fast(n), ref(n);
  silu_mul(gate.data(), up.data(), fast.data(), n);
  ref::silu_mul(gate.data(), up.data(), ref.data(), n);
  for (int64_t i = 0; i < n; ++i)
    EXPECT_NEAR(fast[i], ref[i], 1e-6f * (1.0f + std::fabs(ref[i]))) << i;
}

TEST(Ops, SoftmaxReferenceSumsToOne) {
  std::vector<float> x = {1000.0f, 1001.0f, 999.0f, -5.0f};
  ref::softmax(x.data(), 4);
  float sum = 0.0f;
  for (float v : x) sum += v;
  EXPECT_NEAR(sum, 1.0f, 1e-6f);
  EXPECT_NEAR(x[1] / x[0], std::exp(1.0f), 1e-4f);
}

}  // namespace
}  // namespace llamaserve::cpu
