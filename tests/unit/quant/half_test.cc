// f16 and bf16 conversions: exact values, round-to-nearest-even at every tie, specials.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "quant/blocks.h"

namespace llamaserve {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

uint16_t to_half_bits(float f) { return float_to_half(f).bits; }
float half_value(uint16_t bits) { return half_to_float(Half{bits}); }

TEST(HalfTest, DecodesKnownValues) {
  EXPECT_EQ(half_value(0x0000), 0.0f);
  EXPECT_TRUE(std::signbit(half_value(0x8000)));
  EXPECT_EQ(half_value(0x3c00), 1.0f);
  EXPECT_EQ(half_value(0xc000), -2.0f);
  EXPECT_EQ(half_value(0x3555), 0.333251953125f);
  EXPECT_EQ(half_value(0x7bff), 65504.0f);
  EXPECT_EQ(half_value(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_EQ(half_value(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(half_value(0x03ff), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(half_value(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(half_value(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(half_value(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(half_value(0x7e00)));
  EXPECT_TRUE(std::isnan(half_value(0x7c01)));
  EXPECT_TRUE(std::isnan(half_value(0xfe00)));
}

// Every non-nan half survives half → float → half; nans stay nans.
TEST(HalfTest, AllHalvesRoundTrip) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float value = half_value(static_cast<uint16_t>(bits));
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(half_value(to_half_bits(value)))) << std::hex << bits;
      EXPECT_EQ((bits & 0x7c00u), 0x7c00u);
      continue;
    }
    ASSERT_EQ(to_half_bits(value), bits) << std::hex << bits;
  }
}

// Midpoints between consecutive halves round to the neighbour with an even mantissa; a
// float one ulp either side of the midpoint rounds to the nearer neighbour. This covers
// the subnormal range and the step from the largest finite half to infinity.
TEST(HalfTest, RoundsToNearestEvenAtEveryTie) {
  for (uint32_t bits = 0; bits < 0x7c00; ++bits) {
    const float low = half_value(static_cast<uint16_t>(bits));
    const float high = bits + 1 == 0x7c00 ? 65536.0f : half_value(static_cast<uint16_t>(bits + 1));
    const float mid = (low + high) / 2;  // exact: 12 significant bits
    ASSERT_GT(mid, low);
    ASSERT_LT(mid, high);
    const uint32_t even = (bits & 1) == 0 ? bits : bits + 1;
    ASSERT_EQ(to_half_bits(mid), even) << std::hex << bits;
    ASSERT_EQ(to_half_bits(-mid), even | 0x8000u) << std::hex << bits;
    ASSERT_EQ(to_half_bits(std::nextafter(mid, 0.0f)), bits) << std::hex << bits;
    ASSERT_EQ(to_half_bits(std::nextafter(mid, 1e9f)), bits + 1) << std::hex << bits;
  }
}

TEST(HalfTest, EncodesSpecialsAndOutOfRange) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(to_half_bits(0.0f), 0x0000);
  EXPECT_EQ(to_half_bits(-0.0f), 0x8000);
  EXPECT_EQ(to_half_bits(inf), 0x7c00);
  EXPECT_EQ(to_half_bits(-inf), 0xfc00);
  EXPECT_EQ(to_half_bits(65504.0f), 0x7bff);
  EXPECT_EQ(to_half_bits(65519.99f), 0x7bff);
  EXPECT_EQ(to_half_bits(65520.0f), 0x7c00);  // tie goes to the even neighbour: infinity
  EXPECT_EQ(to_half_bits(1e10f), 0x7c00);
  EXPECT_EQ(to_half_bits(-3.4e38f), 0xfc00);
  EXPECT_EQ(to_half_bits(std::ldexp(1.0f, -25)), 0x0000);  // tie between 0 and 2^-24
  EXPECT_EQ(to_half_bits(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(to_half_bits(std::ldexp(3.0f, -25)), 0x0002);  // tie between 1 and 2 ulps: even
  EXPECT_EQ(to_half_bits(-std::ldexp(1.0f, -30)), 0x8000);
  EXPECT_EQ(to_half_bits(from_bits(0x00000001)), 0x0000);  // float subnormal
  EXPECT_EQ(to_half_bits(from_bits(0x80400000)), 0x8000);
  const uint16_t nan = to_half_bits(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  // A signalling nan whose payload sits only in the low bits must not become infinity.
  const uint16_t snan = to_half_bits(from_bits(0x7f800001));
  EXPECT_EQ(snan & 0x7c00, 0x7c00);
  EXPECT_NE(snan & 0x03ff, 0);
  EXPECT_EQ(to_half_bits(from_bits(0xff800001)) & 0x8000, 0x8000);
}

#if defined(__F16C__)
// The hardware converter is an independent reference for random bit patterns of every
// exponent (nans excluded: payload handling is implementation-defined).
TEST(HalfTest, MatchesF16CHardware) {
  std::mt19937 rng(7);
  for (int i = 0; i < 2'000'000; ++i) {
    const float f = from_bits(static_cast<uint32_t>(rng()));
    if (std::isnan(f)) continue;
    const uint16_t expected = static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
    ASSERT_EQ(to_half_bits(f), expected) << f;
  }
}
#endif

TEST(BF16Test, DecodesAndEncodesKnownValues) {
  EXPECT_EQ(bf16_to_float(BF16{0x3f80}), 1.0f);
  EXPECT_EQ(bf16_to_float(BF16{0xc040}), -3.0f);
  EXPECT_EQ(bf16_to_float(BF16{0x0001}), from_bits(0x00010000));  // subnormal
  EXPECT_EQ(bf16_to_float(BF16{0x7f80}), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(bf16_to_float(BF16{0x7fc0})));
  EXPECT_EQ(float_to_bf16(1.0f).bits, 0x3f80);
  EXPECT_EQ(float_to_bf16(-0.0f).bits, 0x8000);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()).bits, 0x7f80);
  // Ties: 0x3f808000 is halfway between 0x3f80 (even) and 0x3f81; 0x3f818000 between 0x3f81
  // and 0x3f82 (even).
  EXPECT_EQ(float_to_bf16(from_bits(0x3f808000)).bits, 0x3f80);
  EXPECT_EQ(float_to_bf16(from_bits(0x3f818000)).bits, 0x3f82);
  EXPECT_EQ(float_to_bf16(from_bits(0x3f808001)).bits, 0x3f81);
  EXPECT_EQ(float_to_bf16(from_bits(0x3f807fff)).bits, 0x3f80);
  EXPECT_EQ(float_to_bf16(from_bits(0x7f7fffff)).bits, 0x7f80);  // FLT_MAX rounds to inf
  EXPECT_EQ(float_to_bf16(from_bits(0x00008000)).bits, 0x0000);  // subnormal tie → even
  EXPECT_EQ(float_to_bf16(from_bits(0x00018000)).bits, 0x0002);
  // Nans are quieted and keep their sign, including one whose payload is all in the low bits
  // (truncation alone would give an infinity).
  EXPECT_EQ(float_to_bf16(from_bits(0x7f800001)).bits, 0x7fc0);
  EXPECT_EQ(float_to_bf16(from_bits(0xff800001)).bits, 0xffc0);
  EXPECT_EQ(float_to_bf16(from_bits(0x7fc00000)).bits, 0x7fc0);
}

// Random floats: the result is whichever bf16 neighbour is nearer (ties: even mantissa).
TEST(BF16Test, RoundsToNearestEvenOnRandomValues) {
  std::mt19937 rng(11);
  for (int i = 0; i < 1'000'000; ++i) {
    const uint32_t u = static_cast<uint32_t>(rng());
    const float f = from_bits(u);
    if (!std::isfinite(f)) continue;
    const uint16_t below = static_cast<uint16_t>(u >> 16);  // truncation: toward zero
    const double low = bf16_to_float(BF16{below});
    double high = bf16_to_float(BF16{static_cast<uint16_t>(below + 1)});
    if (std::isinf(high)) high = std::copysign(std::ldexp(1.0, 128), high);  // where inf starts
    const double dist_low = std::fabs(static_cast<double>(f) - low);
    const double dist_high = std::fabs(high - static_cast<double>(f));
    uint16_t expected = below;
    if (dist_high < dist_low || (dist_high == dist_low && (below & 1))) expected = below + 1;
    ASSERT_EQ(float_to_bf16(f).bits, expected) << std::hex << u;
  }
}

TEST(BF16Test, AllBF16RoundTrip) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float value = bf16_to_float(BF16{static_cast<uint16_t>(bits)});
    if (std::isnan(value)) continue;
    ASSERT_EQ(float_to_bf16(value).bits, bits) << std::hex << bits;
  }
}

}  // namespace
}  // namespace llamaserve
