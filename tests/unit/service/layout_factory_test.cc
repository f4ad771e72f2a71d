// create_executor and the --device values every command shares: parsing, the CPU executor it
// builds from the common options, and the errors for CUDA devices a build or a machine cannot
// use.
#include <gtest/gtest.h>

#include <filesystem>

#include "service/layout_factory.h"

namespace llamaserve {
namespace {

namespace fs = std::filesystem;

TEST(ParseDevice, AcceptsCpuCudaAndIndices) {
  struct Case {
    const char* text;
    DeviceChoice::Kind kind;
    int index;
  };
  for (const Case& c :
       {Case{"cpu", DeviceChoice::Kind::kCpu, 0}, Case{"cuda", DeviceChoice::Kind::kCuda, 0},
        Case{"cuda:0", DeviceChoice::Kind::kCuda, 0}, Case{"cuda:3", DeviceChoice::Kind::kCuda, 3},
        Case{"1", DeviceChoice::Kind::kCuda, 1}}) {
    const Result<DeviceChoice> d = parse_device(c.text);
    ASSERT_TRUE(d.is_ok()) << c.text << ": " << d.status().to_string();
    EXPECT_EQ(d->kind, c.kind) << c.text;
    EXPECT_EQ(d->index, c.index) << c.text;
  }
  EXPECT_EQ(parse_device("cuda:2")->name(), "cuda:2");
  EXPECT_EQ(parse_device("cpu")->name(), "cpu");
}

TEST(ParseDevice, RefusesMalformedAndSeveralDevices) {
  for (const char* text : {"", "gpu", "cuda:", "cuda:x", "cuda:-1", "-1", "1x", "CPU", "cuda0"}) {
    const Result<DeviceChoice> d = parse_device(text);
    ASSERT_FALSE(d.is_ok()) << "'" << text << "'";
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(d.status().message().find("expected cpu, cuda, cuda:N"), std::string::npos)
        << d.status().message();
  }
  const Result<DeviceChoice> several = parse_device("0,1");
  ASSERT_FALSE(several.is_ok());
  EXPECT_EQ(several.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(several.status().message().find("--tp or --pp"), std::string::npos);
}

TEST(ParseDevices, ListsAndTheirErrors) {
  auto two = parse_devices("0,cuda:1");
  ASSERT_TRUE(two.is_ok()) << two.status().to_string();
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[0].name(), "cuda:0");
  EXPECT_EQ((*two)[1].name(), "cuda:1");
  auto cpu = parse_devices("cpu");
  ASSERT_TRUE(cpu.is_ok());
  EXPECT_EQ(cpu->front().kind, DeviceChoice::Kind::kCpu);
  for (const char* bad : {"0,0", "cpu,0", "0,cpu", "0,", ",1", "0,,1", "0,x"}) {
    EXPECT_FALSE(parse_devices(bad).is_ok()) << bad;
  }
  EXPECT_NE(parse_devices("1,cuda:1").status().message().find("listed twice"), std::string::npos);
}

TEST(ReplicaOptions, SplitsDevicesIntoConsecutiveGroups) {
  ExecutorOptions base;
  base.device = "0,1,2,3";
  base.tensor_parallel = 2;
  auto replicas = replica_options(base, 2);
  ASSERT_TRUE(replicas.is_ok()) << replicas.status().to_string();
  ASSERT_EQ(replicas->size(), 2u);
  EXPECT_EQ((*replicas)[0].device, "cuda:0,cuda:1");
  EXPECT_EQ((*replicas)[1].device, "cuda:2,cuda:3");
  EXPECT_EQ((*replicas)[1].tensor_parallel, 2);

  base.tensor_parallel = 1;
  auto wrong = replica_options(base, 3);
  ASSERT_FALSE(wrong.is_ok());
  EXPECT_NE(wrong.status().message().find("need 3 devices"), std::string::npos)
      << wrong.status().message();
  EXPECT_FALSE(replica_options(base, 0).is_ok());

  ExecutorOptions cpu;
  cpu.threads = 4;
  auto cpu_replicas = replica_options(cpu, 2);
  ASSERT_TRUE(cpu_replicas.is_ok());
  ASSERT_EQ(cpu_replicas->size(), 2u);
  EXPECT_EQ((*cpu_replicas)[0].threads, 2);
  EXPECT_EQ((*cpu_replicas)[1].device, "cpu");
  cpu.pipeline_parallel = 2;
  EXPECT_FALSE(replica_options(cpu, 1).is_ok());
}

std::shared_ptr<const LoadedModel> tiny_model() {
  const fs::path path =
      fs::path(LLAMASERVE_SOURCE_DIR) / "tests" / "fixtures" / "reference" / "tiny-llama-f16.gguf";
  auto model = load_model(path.string());
  EXPECT_TRUE(model.is_ok()) << model.status().to_string();
  return model.is_ok() ? *model : nullptr;
}

TEST(CreateExecutor, BuildsTheCpuExecutorFromTheCommonOptions) {
  auto model = tiny_model();
  ASSERT_NE(model, nullptr);
  ExecutorOptions o;
  o.threads = 1;
  o.kv_capacity_tokens = 100;  // 7 blocks of 16
  o.kv_block_size = 16;
  o.max_batch_tokens = 64;
  auto executor = create_executor(model, o);
  ASSERT_TRUE(executor.is_ok()) << executor.status().to_string();
  EXPECT_EQ((*executor)->kv_info().n_blocks, 7);
  EXPECT_EQ((*executor)->kv_info().block_size, 16);
  EXPECT_NE((*executor)->describe().find("cpu, 1 threads"), std::string::npos)
      << (*executor)->describe();
  EXPECT_NE((*executor)->describe().find("max 64 tokens"), std::string::npos);

  // The executor runs: one token, its logits.
  Batch b;
  b.tokens = {1};
  b.positions = {0};
  b.seq_index = {0};
  b.blocks_per_seq = 1;
  b.block_tables = {0};
  b.seq_lengths = {1};
  b.logit_rows = {0};
  std::vector<float> logits(static_cast<size_t>(model->config.n_vocab));
  EXPECT_TRUE((*executor)->forward(b, logits).is_ok());

  o.device = "tpu";
  EXPECT_EQ(create_executor(model, o).status().code(), StatusCode::kInvalidArgument);
}

TEST(CreateExecutor, CudaDevicesNeedACudaBuildAndADevice) {
  auto model = tiny_model();
  ASSERT_NE(model, nullptr);
  ExecutorOptions o;
  o.device = "cuda:0";
  o.kv_capacity_tokens = 64;
  const auto executor = create_executor(model, o);
  if (!cuda_build()) {
    ASSERT_FALSE(executor.is_ok());
    EXPECT_EQ(executor.status().code(), StatusCode::kUnsupported);
    EXPECT_NE(executor.status().message().find("-DLLAMASERVE_CUDA=ON"), std::string::npos)
        << executor.status().message();
    return;
  }
  // A CUDA build: either a device exists and the executor was made, or a clear error.
  if (!executor.is_ok()) {
    EXPECT_FALSE(executor.status().message().empty());
  } else {
    EXPECT_NE((*executor)->describe().find("cuda:0"), std::string::npos);
  }
  o.device = "cuda:4096";
  EXPECT_FALSE(create_executor(model, o).is_ok());
}

TEST(CreateExecutor, ParallelLayoutsAreCheckedBeforeAnyDeviceIsTouched) {
  auto model = tiny_model();
  ASSERT_NE(model, nullptr);
  ExecutorOptions o;
  o.tensor_parallel = 2;  // on the CPU
  EXPECT_NE(create_executor(model, o).status().message().find("need CUDA devices"),
            std::string::npos);
  o.device = "0,1,2";  // three devices for tp 2
  const Status count = create_executor(model, o).status();
  EXPECT_EQ(count.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(count.message().find("need 2 devices"), std::string::npos) << count.message();
  o.tensor_parallel = 0;
  EXPECT_EQ(create_executor(model, o).status().code(), StatusCode::kInvalidArgument);
}

TEST(MeasureCopyBandwidth, CpuCopiesAndRefusesNothing) {
  const Result<double> bps = measure_copy_bandwidth(DeviceChoice{}, 1 << 20, 3);
  ASSERT_TRUE(bps.is_ok()) << bps.status().to_string();
  EXPECT_GT(*bps, 1e8);  // any machine copies more than 100 MB/s
  EXPECT_FALSE(measure_copy_bandwidth(DeviceChoice{}, 0, 3).is_ok());
  EXPECT_FALSE(measure_copy_bandwidth(DeviceChoice{}, 1 << 20, 0).is_ok());
}

}  // namespace
}  // namespace llamaserve
