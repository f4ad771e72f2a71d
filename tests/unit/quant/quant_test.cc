// Row-level API: round-trip error bounds on odd sizes, legacy-encoder rules, edge cases,
// the reference dot product, the threaded tensor helper and error statuses.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace llamaserve {
namespace {

const TensorType kAllTypes[] = {TensorType::F32,  TensorType::F16,  TensorType::BF16,
                                TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1,
                                TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K};

int64_t block_elems(TensorType type) { return traits(type).block_elems; }
int64_t pad_to_block(TensorType type, int64_t n) {
  return (n + block_elems(type) - 1) / block_elems(type) * block_elems(type);
}

std::vector<float> gaussian(int64_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = dist(rng);
  return x;
}

std::vector<uint8_t> quantize(TensorType type, const std::vector<float>& x) {
  std::vector<uint8_t> bytes(row_bytes(type, x.size()));
  const Status status = quantize_row(type, x.data(), bytes.data(), static_cast<int64_t>(x.size()));
  EXPECT_TRUE(status.is_ok()) << status.to_string();
  return bytes;
}

std::vector<float> round_trip(TensorType type, const std::vector<float>& x) {
  const std::vector<uint8_t> bytes = quantize(type, x);
  std::vector<float> y(x.size());
  const Status status =
      dequantize_row(type, bytes.data(), y.data(), static_cast<int64_t>(x.size()));
  EXPECT_TRUE(status.is_ok()) << status.to_string();
  return y;
}

// sqrt(sum (x - y)^2 / sum x^2)
double relative_rms(const std::vector<float>& x, const std::vector<float>& y) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    ref += static_cast<double>(x[i]) * x[i];
  }
  return std::sqrt(err / ref);
}

// Measured on gaussian data (seeded, sizes below): F16 0.021%, BF16 0.17%, Q8_0 0.54%,
// Q6_K 1.7%, Q5_K 3.5%, Q4_K 7.0%, Q4_1 7.8%, Q4_0 8.6%. A ggml-style reference search
// (weighted qkx2 / qx searches) measures 1.8% / 3.6% / 7.2% on the K-quants of the same data.
struct ErrorBound {
  TensorType type;
  double max_relative_rms;
};
constexpr ErrorBound kBounds[] = {
    {TensorType::F32, 0.0},    {TensorType::F16, 0.0003}, {TensorType::BF16, 0.0022},
    {TensorType::Q8_0, 0.006}, {TensorType::Q6_K, 0.019}, {TensorType::Q5_K, 0.038},
    {TensorType::Q4_K, 0.076}, {TensorType::Q4_1, 0.085}, {TensorType::Q4_0, 0.095},
};

TEST(QuantTest, RoundTripErrorWithinBoundsOnOddSizes) {
  for (const ErrorBound& bound : kBounds) {
    const TensorType type = bound.type;
    std::vector<int64_t> sizes = {pad_to_block(type, 769), pad_to_block(type, 5125), 256 * 21};
    if (block_elems(type) <= 32) sizes.push_back(32 * 37);
    uint32_t seed = 100;
    for (const int64_t n : sizes) {
      const std::vector<float> x = gaussian(n, seed++, 0.02f);  // weight-like magnitudes
      const double rms = relative_rms(x, round_trip(type, x));
      EXPECT_LE(rms, bound.max_relative_rms) << type_name(type) << " n=" << n;
      if (type != TensorType::F32) {
        EXPECT_GT(rms, 0.0) << type_name(type);
      }
    }
  }
}

// More bits, less error: the K-quant searches must beat the plain min/max rule of Q4_1.
TEST(QuantTest, ErrorDecreasesWithBits) {
  const std::vector<float> x = gaussian(256 * 64, 7);
  const TensorType order[] = {TensorType::Q8_0, TensorType::Q6_K, TensorType::Q5_K,
                              TensorType::Q4_K, TensorType::Q4_1, TensorType::Q4_0};
  double previous = 0;
  for (const TensorType type : order) {
    const double rms = relative_rms(x, round_trip(type, x));
    EXPECT_GT(rms, previous) << type_name(type);
    previous = rms;
  }
}

// Each sub-block picks its own scale: sub-blocks of very different magnitudes (the
// super-block scale covers the largest) still decode close to the input, and the error of a
// K-quant on a scaled input scales with it.
TEST(QuantTest, KQuantsHandleUnevenSubBlocks) {
  std::vector<float> x = gaussian(256 * 8, 21);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] *= std::pow(4.0f, static_cast<float>((i / 32) % 8) - 4);
  for (const TensorType type : {TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K}) {
    const std::vector<float> y = round_trip(type, x);
    for (float v : y) ASSERT_TRUE(std::isfinite(v));
    EXPECT_LE(relative_rms(x, y), 0.08) << type_name(type);
  }
}

TEST(QuantTest, ZerosAndConstantsAreExact) {
  for (const TensorType type : kAllTypes) {
    const int64_t n = pad_to_block(type, 512);
    const std::vector<float> zeros(static_cast<size_t>(n), 0.0f);
    EXPECT_EQ(round_trip(type, zeros), zeros) << type_name(type);
    // 0.75 and -2.5 are exact in every format; a constant block fits any scale/min model.
    for (const float c : {0.75f, -2.5f}) {
      const std::vector<float> constant(static_cast<size_t>(n), c);
      const std::vector<float> y = round_trip(type, constant);
      for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y[i], c, 1e-3 * std::fabs(c)) << type_name(type);
    }
  }
}

TEST(QuantTest, OutliersAndTinyValuesStayFinite) {
  for (const TensorType type : kAllTypes) {
    const int64_t n = pad_to_block(type, 1024);
    std::vector<float> x = gaussian(n, 3, 1e-3f);
    x[5] = 40.0f;
    x[n - 1] = -40.0f;
    std::vector<float> y = round_trip(type, x);
    for (float v : y) ASSERT_TRUE(std::isfinite(v)) << type_name(type);
    EXPECT_NEAR(y[5], 40.0f, 0.4f) << type_name(type);
    EXPECT_NEAR(y[n - 1], -40.0f, 0.4f) << type_name(type);

    // Values so small that block scales underflow f16: decode to (near) zero, never nan.
    const std::vector<float> tiny = gaussian(n, 4, 1e-9f);
    y = round_trip(type, tiny);
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_TRUE(std::isfinite(y[i])) << type_name(type);
      ASSERT_LE(std::fabs(y[i]), 1e-7f) << type_name(type);
    }
  }
}

// Q8_0 / Q4_0 / Q4_1 follow ggml's reference rules exactly; check them on hand-made blocks.
TEST(QuantTest, LegacyEncodersFollowGgmlRules) {
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i) - 12.0f;  // -12 .. 19
  {
    // Q8_0: d = amax / 127, q = round-half-away(x / d).
    const std::vector<uint8_t> bytes = quantize(TensorType::Q8_0, x);
    BlockQ8_0 block;
    std::memcpy(&block, bytes.data(), sizeof block);
    EXPECT_EQ(block.d.bits, float_to_half(19.0f / 127).bits);
    const float inverse_d = 1.0f / (19.0f / 127);
    for (int i = 0; i < 32; ++i) EXPECT_EQ(block.qs[i], std::roundf(x[i] * inverse_d)) << i;
    EXPECT_EQ(block.qs[31], 127);
  }
  {
    // Q4_0: the largest-magnitude element (19) maps to q = 0 with d = 19 / -8.
    const std::vector<uint8_t> bytes = quantize(TensorType::Q4_0, x);
    BlockQ4_0 block;
    std::memcpy(&block, bytes.data(), sizeof block);
    EXPECT_EQ(block.d.bits, float_to_half(19.0f / -8).bits);
    EXPECT_EQ(q4_nibble(block.qs, 31), 0);
    EXPECT_EQ(q4_nibble(block.qs, 12), 8);  // x = 0
    EXPECT_EQ(q4_nibble(block.qs, 0), 13);  // -12 / (-19/8) = 5.05 → 13
  }
  {
    // Q4_1: d = (max - min) / 15, m = min, q = trunc((x - min) / d + 0.5).
    const std::vector<uint8_t> bytes = quantize(TensorType::Q4_1, x);
    BlockQ4_1 block;
    std::memcpy(&block, bytes.data(), sizeof block);
    EXPECT_EQ(block.d.bits, float_to_half(31.0f / 15).bits);
    EXPECT_EQ(half_to_float(block.m), -12.0f);
    EXPECT_EQ(q4_nibble(block.qs, 0), 0);
    EXPECT_EQ(q4_nibble(block.qs, 31), 15);
    EXPECT_EQ(q4_nibble(block.qs, 16), 8);  // x = 4: 16 / 2.0667 = 7.74 → 8
  }
}

TEST(QuantTest, WritesExactlyRowBytes) {
  for (const TensorType type : kAllTypes) {
    const int64_t n = pad_to_block(type, 600);
    const std::vector<float> x = gaussian(n, 9);
    const size_t bytes = row_bytes(type, static_cast<size_t>(n));
    std::vector<uint8_t> buffer(bytes + 64, 0xab);
    ASSERT_TRUE(quantize_row(type, x.data(), buffer.data(), n).is_ok());
    for (size_t i = bytes; i < buffer.size(); ++i) ASSERT_EQ(buffer[i], 0xab) << type_name(type);
    std::vector<float> y(static_cast<size_t>(n) + 16, 123.0f);
    ASSERT_TRUE(dequantize_row(type, buffer.data(), y.data(), n).is_ok());
    for (size_t i = static_cast<size_t>(n); i < y.size(); ++i) ASSERT_EQ(y[i], 123.0f);
  }
}

TEST(QuantTest, DequantizeAcceptsUnalignedSource) {
  for (const TensorType type : kAllTypes) {
    const int64_t n = pad_to_block(type, 300);
    const std::vector<float> x = gaussian(n, 12);
    const std::vector<uint8_t> bytes = quantize(type, x);
    std::vector<uint8_t> shifted(bytes.size() + 1);
    std::memcpy(shifted.data() + 1, bytes.data(), bytes.size());
    std::vector<float> aligned(static_cast<size_t>(n)), unaligned(static_cast<size_t>(n));
    ASSERT_TRUE(dequantize_row(type, bytes.data(), aligned.data(), n).is_ok());
    ASSERT_TRUE(dequantize_row(type, shifted.data() + 1, unaligned.data(), n).is_ok());
    EXPECT_EQ(aligned, unaligned) << type_name(type);
  }
}

TEST(QuantTest, DotRowMatchesDequantizedDot) {
  for (const TensorType type : kAllTypes) {
    const int64_t n = pad_to_block(type, 5125);
    const std::vector<float> w = gaussian(n, 31);
    const std::vector<float> x = gaussian(n, 32);
    const std::vector<uint8_t> bytes = quantize(type, w);
    std::vector<float> decoded(static_cast<size_t>(n));
    ASSERT_TRUE(dequantize_row(type, bytes.data(), decoded.data(), n).is_ok());
    double expected = 0, magnitude = 0;
    for (int64_t i = 0; i < n; ++i) {
      expected += static_cast<double>(decoded[i]) * x[i];
      magnitude += std::fabs(static_cast<double>(decoded[i]) * x[i]);
    }
    EXPECT_NEAR(dot_row(type, bytes.data(), x.data(), n), expected, 1e-6 * magnitude)
        << type_name(type);
  }
  const float w[4] = {1.0f, -2.0f, 0.5f, 4.0f};
  const float x[4] = {3.0f, 1.0f, 8.0f, -0.25f};
  EXPECT_EQ(dot_row(TensorType::F32, w, x, 4), 3.0f - 2.0f + 4.0f - 1.0f);
  EXPECT_TRUE(std::isnan(dot_row(TensorType::Q5_0, w, x, 32)));
  EXPECT_TRUE(std::isnan(dot_row(TensorType::Q8_0, w, x, 4)));
}

TEST(QuantTest, QuantizeTensorMatchesRowByRow) {
  ThreadPool pool(2);
  for (const TensorType type : {TensorType::Q4_K, TensorType::Q8_0, TensorType::F16}) {
    const int64_t n_rows = 7;
    const int64_t n_cols = 512;
    const std::vector<float> x = gaussian(n_rows * n_cols, 41);
    const size_t bytes_per_row = row_bytes(type, n_cols);
    std::vector<uint8_t> expected(bytes_per_row * n_rows);
    for (int64_t r = 0; r < n_rows; ++r) {
      ASSERT_TRUE(
          quantize_row(type, x.data() + r * n_cols, expected.data() + r * bytes_per_row, n_cols)
              .is_ok());
    }
    std::vector<uint8_t> threaded(expected.size()), inline_rows(expected.size());
    ASSERT_TRUE(quantize_tensor(type, x.data(), threaded.data(), n_rows, n_cols, &pool).is_ok());
    ASSERT_TRUE(
        quantize_tensor(type, x.data(), inline_rows.data(), n_rows, n_cols, nullptr).is_ok());
    EXPECT_EQ(threaded, expected) << type_name(type);
    EXPECT_EQ(inline_rows, expected) << type_name(type);
  }
}

TEST(QuantTest, RejectsUnsupportedTypesAndPartialBlocks) {
  float x[512] = {};
  uint8_t bytes[1024] = {};
  Status status = dequantize_row(TensorType::Q5_0, bytes, x, 32);
  EXPECT_EQ(status.code(), StatusCode::kUnsupported);
  EXPECT_NE(status.message().find("Q5_0"), std::string::npos) << status.message();
  EXPECT_EQ(quantize_row(TensorType::Q2_K, x, bytes, 256).code(), StatusCode::kUnsupported);
  EXPECT_EQ(quantize_row(static_cast<TensorType>(99), x, bytes, 32).code(),
            StatusCode::kUnsupported);

  status = quantize_row(TensorType::Q8_0, x, bytes, 33);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("33"), std::string::npos) << status.message();
  EXPECT_EQ(dequantize_row(TensorType::Q4_K, bytes, x, 32).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(dequantize_row(TensorType::F16, bytes, x, -1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(quantize_tensor(TensorType::Q6_K, x, bytes, 1, 100, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(quantize_tensor(TensorType::Q8_0, x, bytes, -1, 32, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(check_row(TensorType::Q5_K, 512).is_ok());
  EXPECT_TRUE(check_row(TensorType::BF16, 3).is_ok());
  EXPECT_TRUE(dequantize_row(TensorType::Q4_0, bytes, x, 0).is_ok());

  for (const TensorType type : kAllTypes) EXPECT_TRUE(quant_supported(type)) << type_name(type);
  EXPECT_FALSE(quant_supported(TensorType::Q8_K));
}

TEST(QuantTest, ParsesTypeNames) {
  for (const TensorType type : kAllTypes) {
    const Result<TensorType> parsed = parse_tensor_type(type_name(type));
    ASSERT_TRUE(parsed.is_ok()) << type_name(type);
    EXPECT_EQ(*parsed, type);
  }
  const Result<TensorType> lower = parse_tensor_type("q4_k");
  ASSERT_TRUE(lower.is_ok());
  EXPECT_EQ(*lower, TensorType::Q4_K);
  for (const char* bad : {"", "Q5_0", "Q4_KK", "int8"}) {
    const Result<TensorType> parsed = parse_tensor_type(bad);
    EXPECT_FALSE(parsed.is_ok()) << bad;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace llamaserve
