// Tensor parallel with one process per GPU (parallel/distributed_tp.h): rank 0 is an executor in
// this test on cuda:0, rank 1 a `llamaserve tp-worker` child process on cuda:1. Its logits for
// prefill (in pieces), mixed and decode batches match the in-process tp=2 executor's, and so do
// the tokens it draws; once the executor is gone the worker exits 0. A worker killed in the
// middle of a run makes rank 0's pass return an error instead of hanging, and every later pass
// too; a worker started for another group size is refused on both sides.
//
// Needs 2 CUDA devices and the llamaserve binary: LLAMASERVE_BIN, else the build directory's
// src/cli/llamaserve (as configured, or beside this binary's tests/gpu folder, as in a carried
// build). Skips without them.
#include <gtest/gtest.h>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "batch_builders.h"
#include "model/importers/synth_model.h"
#include "service/layout_factory.h"
#include "test_util.h"

extern char** environ;

namespace llamaserve {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using cuda::testing::device_count;
using cuda::testing::max_rel_error;
using cuda::testing::source_dir;

// The llamaserve binary the worker runs, or empty.
fs::path llamaserve_binary() {
  if (const char* env = std::getenv("LLAMASERVE_BIN")) return env;
  std::vector<fs::path> candidates = {fs::path(LLAMASERVE_BINARY_DIR) / "src/cli/llamaserve"};
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  if (!error) candidates.push_back(self.parent_path() / "../../src/cli/llamaserve");
  for (const fs::path& path : candidates) {
    if (fs::exists(path)) return fs::canonical(path);
  }
  return {};
}

// A `llamaserve tp-worker` child process.
class Worker {
 public:
  ~Worker() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  void spawn(const std::string& model, int port, int world = 2) {
    const std::string binary = llamaserve_binary().string();
    std::vector<std::string> args = {binary,
                                     "tp-worker",
                                     "-m",
                                     model,
                                     "--tp",
                                     std::to_string(world),
                                     "--tp-rank",
                                     "1",
                                     "--tp-coordinator",
                                     "127.0.0.1:" + std::to_string(port),
                                     "--device",
                                     "cuda:1",
                                     "--tp-timeout-ms",
                                     "120000"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int error = posix_spawn(&pid_, binary.c_str(), nullptr, nullptr, argv.data(), environ);
    ASSERT_EQ(error, 0) << "posix_spawn " << binary << ": " << std::strerror(error);
  }

  pid_t pid() const { return pid_; }

  // The exit status within `timeout`, or -1 (the process still runs); -2 for a signal.
  int wait_exit(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      const pid_t done = waitpid(pid_, &status, WNOHANG);
      if (done == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -2;
      }
      std::this_thread::sleep_for(20ms);
    }
    return -1;
  }

  void kill_now() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    exited_ = true;
  }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
};

class TpProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (device_count() < 2) {
      GTEST_SKIP() << "needs 2 CUDA devices, " << device_count() << " visible";
    }
    if (llamaserve_binary().empty()) {
      if (std::getenv("LLAMASERVE_REQUIRE_GPU") != nullptr) FAIL() << "no llamaserve binary";
      GTEST_SKIP() << "no llamaserve binary (set LLAMASERVE_BIN)";
    }
  }
};

std::shared_ptr<const LoadedModel> load(const fs::path& path) {
  auto model = load_model(path.string());
  EXPECT_TRUE(model.is_ok()) << model.status().to_string();
  return model.is_ok() ? *model : nullptr;
}

const fs::path kF16 = "tests/fixtures/reference/tiny-llama-f16.gguf";

// The synthetic tiny Q8_0 model of multi_gpu_test (4 heads, 2 KV heads: tp=2 divides it),
// written once; its path, for the worker.
fs::path tiny_q8_0_path() {
  static const fs::path path = [] {
    const fs::path out = fs::temp_directory_path() / "llamaserve-tp-process-tiny-q8_0.gguf";
    SynthOptions o;
    o.shape = "tiny";
    o.type = "q8_0";
    o.output_path = out.string();
    o.vocab_path = cuda::testing::vocab_path();
    o.seed = 11;
    auto written = write_synthetic_model(o);
    EXPECT_TRUE(written.is_ok()) << written.status().to_string();
    return out;
  }();
  return path;
}

// multi_gpu_test's options: three sequences of 32 blocks, batches above 64 rows in pieces.
ExecutorOptions small(const std::string& devices, int tp) {
  ExecutorOptions o;
  o.device = devices;
  o.tensor_parallel = tp;
  o.kv_capacity_tokens = 3 * 32 * 16;
  o.max_batch_tokens = 64;
  o.max_seqs = 16;
  o.max_context_tokens = 512;
  return o;
}

// Rank 0 on cuda:0, spawning `worker` for rank 1 once it listens.
Result<std::unique_ptr<Executor>> make_group(std::shared_ptr<const LoadedModel> model,
                                             const fs::path& path, Worker& worker,
                                             int worker_world = 2) {
  TpProcessOptions process;
  process.rank = 0;
  process.listen_host = "127.0.0.1";
  process.listen_port = 0;
  process.rendezvous_timeout_ms = 120000;
  process.on_listening = [&](int port) { worker.spawn(path.string(), port, worker_world); };
  return create_tp_rank0_executor(std::move(model), small("cuda:0", 2), process);
}

using gpu_testing::build;
using gpu_testing::kBlocksPerSeq;
using gpu_testing::opening_batches;
using gpu_testing::Rows;
using gpu_testing::run;
using gpu_testing::tokens;

// The group against the in-process tp=2 executor: a prefill of two sequences (in pieces), a
// mixed batch, a batch both refuse (too long), 12 greedy decode steps of three sequences (CUDA
// graph shapes), the last ones drawn on the device; then the worker exits 0 once the executor is
// gone.
void expect_same_as_in_process(const fs::path& path, double tolerance) {
  auto model = load(path);
  ASSERT_NE(model, nullptr);
  const int64_t n_vocab = model->config.n_vocab;
  auto in_process = create_executor(model, small("0,1", 2));
  ASSERT_TRUE(in_process.is_ok()) << in_process.status().to_string();
  Worker worker;
  {
    auto group = make_group(model, path, worker);
    ASSERT_TRUE(group.is_ok()) << group.status().to_string();
    Executor& ex = **group;
    EXPECT_NE(ex.describe().find("tensor parallel over 2 processes"), std::string::npos)
        << ex.describe();
    EXPECT_EQ(ex.kv_info().n_blocks, (*in_process)->kv_info().n_blocks);
    EXPECT_TRUE(ex.samples_on_device());

    for (const Batch& b : opening_batches(n_vocab)) {
      const auto want = run(**in_process, b);
      const auto got = run(ex, b);
      EXPECT_LE(max_rel_error(got, want, n_vocab), tolerance);
    }
    // A sequence past max_context_tokens (512) is refused up front by both groups, which go on:
    // no rank may start a pass that another refuses.
    Batch too_long;
    too_long.tokens = {1};
    too_long.positions = {512};
    too_long.seq_index = {0};
    too_long.blocks_per_seq = 33;
    too_long.block_tables.assign(33, 3);
    too_long.seq_lengths = {513};
    too_long.logit_rows = {0};
    std::vector<float> refused(n_vocab);
    EXPECT_EQ((*in_process)->forward(too_long, refused).code(), StatusCode::kOutOfRange);
    EXPECT_EQ(ex.forward(too_long, refused).code(), StatusCode::kOutOfRange);
    std::vector<int32_t> next = {0, 0, 0};
    std::vector<int32_t> length = {91, 50, 17};
    for (int step = 0; step < 12; ++step) {
      std::vector<Rows> rows;
      for (int32_t s = 0; s < 3; ++s)
        rows.push_back({s, {next[static_cast<size_t>(s)]}, length[static_cast<size_t>(s)]});
      const Batch b = build(rows, 3);
      const auto want = run(**in_process, b);
      std::vector<float> got(want.size(), NAN);
      if (step < 8) {
        ASSERT_OK(ex.forward(b, got));
      } else {
        // Greedy on the device: the token is the argmax of the logits that came back.
        std::vector<RowSampling> greedy(3);
        std::vector<int32_t> drawn(3, -1);
        ASSERT_OK(ex.forward_sampled(b, greedy, drawn, got));
        for (size_t s = 0; s < 3; ++s) {
          const float* row = got.data() + s * n_vocab;
          EXPECT_EQ(drawn[s], std::max_element(row, row + n_vocab) - row) << "step " << step;
        }
      }
      EXPECT_LE(max_rel_error(got, want, n_vocab), tolerance) << "step " << step;
      for (int32_t s = 0; s < 3; ++s) {
        const auto row = want.begin() + static_cast<std::ptrdiff_t>(s * n_vocab);
        next[static_cast<size_t>(s)] =
            static_cast<int32_t>(std::max_element(row, row + n_vocab) - row);
        ++length[static_cast<size_t>(s)];
      }
    }
  }  // the group's executor is destroyed: rank 1 is shut down
  EXPECT_EQ(worker.wait_exit(60s), 0) << "the worker did not exit cleanly";
}

// Tolerances as multi_gpu_test's tensor-parallel tests against one GPU: the same shards, but
// the processes sum through NCCL (in another order than the in-process group's fused and
// pulled sums) and the prompts' GEMM partials as halves (measured 2.6e-3 for F16).
TEST_F(TpProcessTest, F16MatchesTheInProcessGroup) {
  expect_same_as_in_process(source_dir() / kF16, 4e-3);
}

TEST_F(TpProcessTest, Q8_0MatchesTheInProcessGroup) {
  expect_same_as_in_process(tiny_q8_0_path(), 2.5e-2);
}

TEST_F(TpProcessTest, AWorkerOfAnotherGroupSizeIsRefusedOnBothSides) {
  const fs::path path = source_dir() / kF16;
  auto model = load(path);
  ASSERT_NE(model, nullptr);
  Worker worker;
  const Status status = make_group(model, path, worker, /*worker_world=*/4).status();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("was started for 4 ranks, rank 0 for 2"), std::string::npos)
      << status.to_string();
  EXPECT_EQ(worker.wait_exit(60s), 2) << "the refused worker's exit status";
}

// Last, so that what a killed rank leaves behind in this process cannot affect the others.
// The worker is killed while rank 0 runs step after step: the pass that meets the dead rank
// returns an error within a minute (NCCL's all-reduce would wait forever), every later pass
// fails at once, and destroying the executor does not hang either. Where NCCL's abort does not
// release the pass (seen on the H200 pair with NCCL 2.28), rank 0 gives up on it after
// kAbortGrace (distributed_tp.cc) and leaves its thread to the process exit.
TEST_F(TpProcessTest, AWorkerDyingMidRunFailsThePassInsteadOfHanging) {
  const fs::path path = source_dir() / kF16;
  auto model = load(path);
  ASSERT_NE(model, nullptr);
  const int64_t n_vocab = model->config.n_vocab;
  Worker worker;
  auto group = make_group(model, path, worker);
  ASSERT_TRUE(group.is_ok()) << group.status().to_string();
  std::shared_ptr<Executor> ex = std::move(group).value();
  const Batch prefill = build({{0, tokens(60, n_vocab, 1), 0}, {1, tokens(60, n_vocab, 2), 0}}, 2);
  run(*ex, prefill);

  std::atomic<int> passes{0};
  auto steps = std::async(std::launch::async, [&]() -> Status {
    // Alternate a long batch (pieces, several all-reduces each) with a decode step.
    const Batch decode = build({{0, {5}, 60}, {1, {6}, 60}}, 2);
    std::vector<float> logits(prefill.logit_rows.size() * n_vocab);
    for (int i = 0; i < 100000; ++i) {
      const Status status = ex->forward(i % 2 == 0 ? prefill : decode, logits);
      if (!status.is_ok()) return status;
      ++passes;
    }
    return Status::ok();
  });
  while (passes.load() < 4 && steps.wait_for(1ms) == std::future_status::timeout) {
  }
  ASSERT_GE(passes.load(), 4) << "the group failed before its worker was killed: "
                              << steps.get().to_string();
  worker.kill_now();
  if (steps.wait_for(60s) != std::future_status::ready) {
    ADD_FAILURE() << "rank 0's pass still waits 60 s after rank 1 died";
    std::quick_exit(1);  // a thread stuck in NCCL cannot be joined
  }
  const Status failed = steps.get();
  EXPECT_FALSE(failed.is_ok());
  EXPECT_NE(failed.message().find("tensor-parallel group of 2 processes stopped"),
            std::string::npos)
      << failed.to_string();
  std::printf("the failed pass: %s\n", failed.to_string().c_str());
  // Every later pass fails at once with the same reason.
  std::vector<float> logits(prefill.logit_rows.size() * n_vocab);
  const Status later = ex->forward(prefill, logits);
  EXPECT_EQ(later.message(), failed.message());
  auto destroyed = std::async(std::launch::async, [&] { ex.reset(); });
  if (destroyed.wait_for(60s) != std::future_status::ready) {
    ADD_FAILURE() << "destroying the broken group hangs";
    std::quick_exit(1);
  }
}

}  // namespace
}  // namespace llamaserve
