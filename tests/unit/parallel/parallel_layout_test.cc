// Device assignment under tensor parallel × pipeline parallel: stage s takes devices
// [s tp, (s+1) tp) in list order, the copies between stages go from the previous stage's
// primary rank to every rank of the next, and the layouts the executor cannot build are
// refused with the numbers. The replica split of a tp × pp layout (replica_options) too.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "parallel/parallel_layout.h"
#include "service/layout_factory.h"

namespace llamaserve {
namespace {

struct Handoff {
  int stage, rank, from, to;
};

void expect_handoffs(const ParallelLayout& layout, const std::vector<Handoff>& want) {
  const std::vector<StageHandoff> got = layout.handoffs();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].stage, want[i].stage) << i;
    EXPECT_EQ(got[i].rank, want[i].rank) << i;
    EXPECT_EQ(got[i].from_device, want[i].from) << i;
    EXPECT_EQ(got[i].to_device, want[i].to) << i;
  }
}

TEST(ParallelLayout, TwoByTwoTakesTheDevicesStageByStage) {
  const std::vector<int> devices = {4, 5, 6, 7};
  auto layout = make_parallel_layout(devices, 2, 2);
  ASSERT_TRUE(layout.is_ok()) << layout.status().to_string();
  EXPECT_EQ(layout->device(0, 0), 4);
  EXPECT_EQ(layout->device(0, 1), 5);
  EXPECT_EQ(layout->device(1, 0), 6);
  EXPECT_EQ(layout->device(1, 1), 7);
  EXPECT_EQ(layout->stage_devices(0), (std::vector<int>{4, 5}));
  EXPECT_EQ(layout->stage_devices(1), (std::vector<int>{6, 7}));
  // Stage 1 reads stage 0's primary (device 4) into both of its ranks.
  expect_handoffs(*layout, {{1, 0, 4, 6}, {1, 1, 4, 7}});
  for (int d : devices) EXPECT_EQ(layout->parts_on(d), 1) << d;
  EXPECT_EQ(layout->parts_on(0), 0);
}

TEST(ParallelLayout, ThreeStagesOfFourRanks) {
  std::vector<int> devices(12);
  for (int i = 0; i < 12; ++i) devices[static_cast<size_t>(i)] = 11 - i;
  auto layout = make_parallel_layout(devices, 4, 3);
  ASSERT_TRUE(layout.is_ok()) << layout.status().to_string();
  EXPECT_EQ(layout->stage_devices(2), (std::vector<int>{3, 2, 1, 0}));
  EXPECT_EQ(layout->device(1, 3), 4);
  const std::vector<StageHandoff> handoffs = layout->handoffs();
  ASSERT_EQ(handoffs.size(), 8u);
  for (const StageHandoff& h : handoffs) {
    EXPECT_EQ(h.from_device, layout->device(h.stage - 1, 0));
    EXPECT_EQ(h.to_device, layout->device(h.stage, h.rank));
  }
}

TEST(ParallelLayout, TensorOnlyAndPipelineOnlyAreOneStageAndOneRank) {
  const std::vector<int> devices = {0, 1, 2};
  auto tp = make_parallel_layout(devices, 3, 1);
  ASSERT_TRUE(tp.is_ok()) << tp.status().to_string();
  EXPECT_EQ(tp->stage_devices(0), devices);
  EXPECT_TRUE(tp->handoffs().empty());

  auto pp = make_parallel_layout(devices, 1, 3);
  ASSERT_TRUE(pp.is_ok()) << pp.status().to_string();
  EXPECT_EQ(pp->stage_devices(2), (std::vector<int>{2}));
  // Neighbouring stages, as the pipeline has always copied.
  expect_handoffs(*pp, {{1, 0, 0, 1}, {2, 0, 1, 2}});
}

// Two GPUs standing in for four: each stage's ranks are distinct, so each communicator is.
TEST(ParallelLayout, ADeviceMayServeSeveralStages) {
  const std::vector<int> devices = {0, 1, 0, 1};
  auto layout = make_parallel_layout(devices, 2, 2);
  ASSERT_TRUE(layout.is_ok()) << layout.status().to_string();
  EXPECT_EQ(layout->parts_on(0), 2);
  EXPECT_EQ(layout->parts_on(1), 2);
  expect_handoffs(*layout, {{1, 0, 0, 0}, {1, 1, 0, 1}});
}

TEST(ParallelLayout, RefusesWhatTheExecutorCannotBuild) {
  struct Case {
    std::vector<int> devices;
    int tp, pp;
    const char* message;
  };
  for (const Case& c : {
           Case{{0, 1, 2}, 2, 2, "tensor parallel 2 x pipeline parallel 2 need 4 devices, 3 given"},
           Case{{0, 1, 2, 3, 4}, 2, 2, "need 4 devices, 5 given"},
           Case{{}, 1, 1, "need 1 devices, 0 given"},
           Case{{0, 1}, 0, 2, "tensor parallel (0) and pipeline parallel (2) must be >= 1"},
           Case{{0, 1}, 2, -1, "must be >= 1"},
           Case{{0, -1}, 2, 1, "device index -1 is negative"},
           Case{{0, 1, 2, 2},
                2,
                2,
                "pipeline stage 1 (devices 2,2) has cuda:2 twice: the ranks of a "
                "tensor-parallel group need distinct devices"},
           Case{{3, 3}, 2, 1, "pipeline stage 0 (devices 3,3) has cuda:3 twice"},
       }) {
    const auto layout = make_parallel_layout(c.devices, c.tp, c.pp);
    ASSERT_FALSE(layout.is_ok()) << c.message;
    EXPECT_EQ(layout.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(layout.status().message().find(c.message), std::string::npos)
        << layout.status().message();
  }
  // One rank per stage: a device twice is two stages, not one communicator.
  EXPECT_TRUE(make_parallel_layout(std::vector<int>{0, 0}, 1, 2).is_ok());
}

// The server's side: replicas × tp × pp devices, each replica the next tp × pp of them, which
// the executor then splits into stages.
TEST(ParallelLayout, ReplicasOfTwoByTwoTakeConsecutiveGroupsOfFour) {
  ExecutorOptions base;
  base.device = "0,1,2,3,4,5,6,7";
  base.tensor_parallel = 2;
  base.pipeline_parallel = 2;
  auto replicas = replica_options(base, 2);
  ASSERT_TRUE(replicas.is_ok()) << replicas.status().to_string();
  ASSERT_EQ(replicas->size(), 2u);
  EXPECT_EQ((*replicas)[0].device, "cuda:0,cuda:1,cuda:2,cuda:3");
  EXPECT_EQ((*replicas)[1].device, "cuda:4,cuda:5,cuda:6,cuda:7");
  EXPECT_EQ((*replicas)[1].pipeline_parallel, 2);

  auto three = replica_options(base, 3);
  ASSERT_FALSE(three.is_ok());
  EXPECT_NE(three.status().message().find(
                "3 replicas x tensor parallel 2 x pipeline parallel 2 need 12 devices; "
                "--devices '0,1,2,3,4,5,6,7' lists 8"),
            std::string::npos)
      << three.status().message();
}

// create_executor counts tp × pp devices before it touches one (in any build).
TEST(ParallelLayout, CreateExecutorCountsTpTimesPpDevices) {
  auto model = load_model(LLAMASERVE_SOURCE_DIR "/tests/fixtures/reference/tiny-llama-f16.gguf");
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  ExecutorOptions o;
  o.tensor_parallel = 2;
  o.pipeline_parallel = 2;
  o.device = "0,1,2";
  const Status count = create_executor(*model, o).status();
  EXPECT_EQ(count.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(count.message().find("tensor parallel 2 x pipeline parallel 2 need 4 devices"),
            std::string::npos)
      << count.message();
}

}  // namespace
}  // namespace llamaserve
