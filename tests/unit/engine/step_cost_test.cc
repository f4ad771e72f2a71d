#include "engine/step_cost.h"

#include <random>

#include <gtest/gtest.h>

namespace llamaserve {
namespace {

// A pass of 7B-like costs: 6 ms + 20 us a row + 9 us per 1000 attention positions.
double true_seconds(const StepShape& s) { return 6e-3 + 20e-6 * s.rows + 9e-6 * s.kpositions; }

// Decode passes of `n` sequences of about `context` positions, and prompt chunks.
StepShape decodes(int n, int context) { return {static_cast<double>(n), n * context / 1000.0}; }

TEST(StepShapeTest, ChunkCountsEveryRowsPositions) {
  const StepShape one = StepShape::chunk(0, 1);
  EXPECT_DOUBLE_EQ(one.rows, 1);
  EXPECT_DOUBLE_EQ(one.kpositions, 0.001);
  // Rows at positions 100..103 attend to 101..104 positions.
  const StepShape four = StepShape::chunk(100, 4);
  EXPECT_DOUBLE_EQ(four.rows, 4);
  EXPECT_DOUBLE_EQ(four.kpositions, (101 + 102 + 103 + 104) / 1000.0);
  StepShape sum = one;
  sum += four;
  EXPECT_DOUBLE_EQ(sum.rows, 5);
}

TEST(StepCostModelTest, ReadyOnlyAfterEnoughPasses) {
  StepCostModel model;
  for (int i = 0; i < StepCostModel::kMinSamples - 1; ++i) {
    model.observe(decodes(8 + i, 300), true_seconds(decodes(8 + i, 300)));
    EXPECT_FALSE(model.ready());
  }
  model.observe(decodes(64, 300), true_seconds(decodes(64, 300)));
  EXPECT_TRUE(model.ready());
}

TEST(StepCostModelTest, RecoversTheCostsOfVariedPasses) {
  StepCostModel model;
  std::mt19937 rng(7);
  for (int i = 0; i < 400; ++i) {
    StepShape shape = decodes(1 + static_cast<int>(rng() % 256), 100 + static_cast<int>(rng() % 400));
    if (i % 3 == 0) shape += StepShape::chunk(static_cast<int64_t>(rng() % 8000), 16 + rng() % 240);
    model.observe(shape, true_seconds(shape));
  }
  ASSERT_TRUE(model.ready());
  EXPECT_NEAR(model.fixed_seconds(), 6e-3, 1e-6);
  EXPECT_NEAR(model.per_row_seconds(), 20e-6, 1e-8);
  EXPECT_NEAR(model.per_kposition_seconds(), 9e-6, 1e-8);
  const StepShape late_chunk = StepShape::chunk(8000, 100);
  EXPECT_NEAR(model.pass_seconds(late_chunk), true_seconds(late_chunk), 1e-6);
  EXPECT_NEAR(model.added_seconds(late_chunk), true_seconds(late_chunk) - 6e-3, 1e-6);
  EXPECT_NE(model.describe().find("fixed 6.00 ms + 20.00 us/row + 9.00 us per 1000"),
            std::string::npos)
      << model.describe();
}

// Noise that would pull a term below zero leaves it at zero and fits the others.
TEST(StepCostModelTest, CoefficientsAreNeverNegative) {
  StepCostModel model;
  std::mt19937 rng(3);
  // Costs that fall with attention positions (as no GPU does): the fit must not extrapolate
  // a negative attention cost.
  for (int i = 0; i < 200; ++i) {
    const StepShape shape = StepShape::chunk(static_cast<int64_t>(rng() % 4000), 1 + rng() % 200);
    model.observe(shape, 5e-3 + 30e-6 * shape.rows - 1e-7 * shape.kpositions);
  }
  ASSERT_TRUE(model.ready());
  EXPECT_GE(model.fixed_seconds(), 0);
  EXPECT_GE(model.per_row_seconds(), 0);
  EXPECT_EQ(model.per_kposition_seconds(), 0);
}

// Passes of a single shape: the fit still reproduces that shape's time.
TEST(StepCostModelTest, OneShapeIsStillPredicted) {
  StepCostModel model;
  for (int i = 0; i < 50; ++i) model.observe(decodes(64, 256), 7e-3);
  ASSERT_TRUE(model.ready());
  EXPECT_NEAR(model.pass_seconds(decodes(64, 256)), 7e-3, 1e-6);
}

// Old passes fade: after the costs change, the fit follows the new ones.
TEST(StepCostModelTest, FollowsCostsThatChange) {
  StepCostModel model;
  std::mt19937 rng(11);
  auto feed = [&](double scale, int n) {
    for (int i = 0; i < n; ++i) {
      StepShape shape = decodes(1 + static_cast<int>(rng() % 128), 200);
      shape += StepShape::chunk(static_cast<int64_t>(rng() % 6000), 16 + rng() % 100);
      model.observe(shape, scale * true_seconds(shape));
    }
  };
  feed(1.0, 300);
  feed(2.0, 3000);
  EXPECT_NEAR(model.fixed_seconds(), 12e-3, 1e-4);
  EXPECT_NEAR(model.per_kposition_seconds(), 18e-6, 2e-7);
}

TEST(StepCostModelTest, RowsWithinIsTheLargestChunkThatFits) {
  StepCostModel model;
  std::mt19937 rng(5);
  for (int i = 0; i < 300; ++i) {
    StepShape shape = decodes(1 + static_cast<int>(rng() % 64), 300);
    shape += StepShape::chunk(static_cast<int64_t>(rng() % 8000), 1 + rng() % 256);
    model.observe(shape, true_seconds(shape));
  }
  ASSERT_TRUE(model.ready());
  for (int64_t first : {0, 100, 2047, 8000}) {
    for (double budget : {0.1e-3, 1e-3, 7e-3}) {
      const int64_t rows = model.rows_within(first, budget, 1 << 20);
      EXPECT_LE(model.added_seconds(StepShape::chunk(first, rows)), budget * (1 + 1e-9));
      EXPECT_GT(model.added_seconds(StepShape::chunk(first, rows + 1)), budget);
    }
  }
  // Late rows cost more: fewer of them fit.
  EXPECT_LT(model.rows_within(8000, 5e-3, 1 << 20), model.rows_within(0, 5e-3, 1 << 20) / 3);
  EXPECT_EQ(model.rows_within(0, 1.0, 37), 37);
  EXPECT_EQ(model.rows_within(0, 0.0, 37), 0);
  EXPECT_EQ(model.rows_within(0, 1e-9, 37), 0);
}

}  // namespace
}  // namespace llamaserve
