// Pipeline layer splits: contiguous, covering, embeddings first and head last, balanced (the
// largest stage no larger than in any other split, checked by trying them all), and the
// operator's --layer-split checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "parallel/pipeline_split.h"

namespace llamaserve {
namespace {

const std::string kSmolLm2 = LLAMASERVE_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
const std::string kTiny = LLAMASERVE_SOURCE_DIR "/tests/fixtures/reference/tiny-llama-f16.gguf";

std::shared_ptr<const LoadedModel> load(const std::string& path) {
  auto model = load_model(path);
  EXPECT_TRUE(model.is_ok()) << model.status().to_string();
  return model.is_ok() ? std::move(model).value() : nullptr;
}

uint64_t largest_stage(const LoadedModel& model, const std::vector<LayerRange>& ranges) {
  uint64_t largest = 0;
  for (const LayerRange& r : ranges) largest = std::max(largest, range_weight_bytes(model, r));
  return largest;
}

void expect_well_formed(const std::vector<LayerRange>& ranges, int32_t n_layer) {
  ASSERT_FALSE(ranges.empty());
  int32_t next = 0;
  for (size_t s = 0; s < ranges.size(); ++s) {
    EXPECT_EQ(ranges[s].begin, next);
    EXPECT_GT(ranges[s].end, ranges[s].begin);
    EXPECT_EQ(ranges[s].embeddings, s == 0);
    EXPECT_EQ(ranges[s].head, s + 1 == ranges.size());
    next = ranges[s].end;
  }
  EXPECT_EQ(next, n_layer);
}

TEST(PipelineSplit, TwoStagesAreTheBestBalance) {
  if (!std::filesystem::exists(kSmolLm2)) GTEST_SKIP() << "model missing: " << kSmolLm2;
  auto model = load(kSmolLm2);
  ASSERT_NE(model, nullptr);
  const auto n_layer = static_cast<int32_t>(model->config.n_layer);
  auto ranges = pipeline_layer_split(*model, 2, {});
  ASSERT_TRUE(ranges.is_ok()) << ranges.status().to_string();
  expect_well_formed(*ranges, n_layer);
  uint64_t best = std::numeric_limits<uint64_t>::max();
  for (int32_t cut = 1; cut < n_layer; ++cut) {
    best =
        std::min(best, largest_stage(*model, {{0, cut, true, false}, {cut, n_layer, false, true}}));
  }
  EXPECT_EQ(largest_stage(*model, *ranges), best);
  // The embeddings (tied with the head: the last stage holds a copy) weigh on both ends.
  for (int stages : {3, 4, 7, 30}) {
    auto more = pipeline_layer_split(*model, stages, {});
    ASSERT_TRUE(more.is_ok()) << stages << ": " << more.status().to_string();
    ASSERT_EQ(more->size(), static_cast<size_t>(stages));
    expect_well_formed(*more, n_layer);
  }
}

TEST(PipelineSplit, RequestedSplitsAreCheckedAndKept) {
  auto model = load(kTiny);  // 3 layers
  ASSERT_NE(model, nullptr);
  const std::vector<int32_t> one_two = {1, 2};
  auto kept = pipeline_layer_split(*model, 2, one_two);
  ASSERT_TRUE(kept.is_ok()) << kept.status().to_string();
  EXPECT_EQ((*kept)[0].end, 1);
  EXPECT_EQ((*kept)[1].begin, 1);
  const std::vector<int32_t> wrong_sum = {1, 1}, zero = {0, 3}, three = {1, 1, 1};
  EXPECT_NE(pipeline_layer_split(*model, 2, wrong_sum).status().message().find("adds up to 2"),
            std::string::npos);
  EXPECT_NE(pipeline_layer_split(*model, 2, zero).status().message().find("at least one layer"),
            std::string::npos);
  EXPECT_NE(pipeline_layer_split(*model, 2, three).status().message().find("lists 3 stages"),
            std::string::npos);
  EXPECT_FALSE(pipeline_layer_split(*model, 4, {}).is_ok());  // more stages than layers
  EXPECT_FALSE(pipeline_layer_split(*model, 0, {}).is_ok());
  auto all = pipeline_layer_split(*model, 3, {});
  ASSERT_TRUE(all.is_ok());
  expect_well_formed(*all, 3);
}

}  // namespace
}  // namespace llamaserve
