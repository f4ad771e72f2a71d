// The names of the ways tensor-parallel ranks sum their partials, as flags and configuration
// spell them: each parses to its mode and back; anything else is refused, naming the choices.
#include "executor/tp_sums.h"

#include <string>

#include <gtest/gtest.h>

namespace llamaserve {
namespace {

TEST(TpSumsTest, ParsesEachModeAndNamesItBack) {
  for (const TpSumMode mode : {TpSumMode::kFused, TpSumMode::kPeer, TpSumMode::kNccl}) {
    const auto parsed = parse_tp_sum_mode(tp_sum_mode_name(mode));
    ASSERT_TRUE(parsed.is_ok()) << parsed.status().to_string();
    EXPECT_EQ(*parsed, mode);
  }
  EXPECT_EQ(std::string(tp_sum_mode_name(TpSumMode::kFused)), "fused");
  EXPECT_EQ(std::string(tp_sum_mode_name(TpSumMode::kPeer)), "peer");
  EXPECT_EQ(std::string(tp_sum_mode_name(TpSumMode::kNccl)), "nccl");
}

TEST(TpSumsTest, RefusesAnythingElse) {
  for (const char* text : {"bogus", "", "Fused", "nccl ", "half"}) {
    SCOPED_TRACE(text);
    const auto parsed = parse_tp_sum_mode(text);
    ASSERT_FALSE(parsed.is_ok());
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find("expected fused, peer or nccl"), std::string::npos)
        << parsed.status().to_string();
  }
}

TEST(TpSumsTest, DefaultsToFusedWithHalfGemmSums) {
  const TpSums sums;
  EXPECT_EQ(sums.mode, TpSumMode::kFused);
  EXPECT_TRUE(sums.half_gemm_sums);
}

}  // namespace
}  // namespace llamaserve
