#include "server/config_layer.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "server/options.h"
#include "service/model_service.h"

namespace llamaserve::server {
namespace {

// Sets environment variables for one test and removes them afterwards.
class ScopedEnv {
 public:
  void set(const std::string& name, const std::string& value) {
    ::setenv(name.c_str(), value.c_str(), 1);
    names_.push_back(name);
  }
  ~ScopedEnv() {
    for (const auto& name : names_) ::unsetenv(name.c_str());
  }

 private:
  std::vector<std::string> names_;
};

class ConfigPrecedence : public ::testing::Test {
 protected:
  void SetUp() override {
    config_path_ = std::filesystem::temp_directory_path() /
                   ("llamaserve_config_test_" + std::to_string(::getpid()) + ".json");
  }
  void TearDown() override { std::filesystem::remove(config_path_); }

  void write_config(const std::string& text) { std::ofstream(config_path_) << text; }

  // Parses argv the way `llamaserve serve` does and finalizes the options.
  Status parse(std::vector<std::string> args) {
    add_service_options(app_, config_);
    std::vector<std::string> argv = {"serve"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::reverse(argv.begin() + 1, argv.end());  // CLI11 takes a reversed vector
    std::vector<std::string> to_parse(argv.begin() + 1, argv.end());
    app_.parse(to_parse);
    return finalize_service_config(app_, config_);
  }

  std::filesystem::path config_path_;
  CLI::App app_{"test"};
  ServiceConfig config_;
  ServerConfig& server() { return config_.server; }
  ModelSpec& model() { return config_.models.front(); }
  ScopedEnv env_;
};

TEST_F(ConfigPrecedence, FlagBeatsEnvBeatsFileBeatsDefault) {
  write_config(R"({"model": "from-file.gguf", "max-running": 3, "max-queue": 7,
                   "queue-timeout-ms": 111, "port": 9001})");
  env_.set("LLAMASERVE_MAX_RUNNING", "5");
  env_.set("LLAMASERVE_MAX_QUEUE", "9");
  Status status = parse({"--config", config_path_.string(), "--max-running", "6"});
  ASSERT_TRUE(status.is_ok()) << status.to_string();
  EXPECT_EQ(model().engine.max_running, 6);   // flag over env and file
  EXPECT_EQ(server().max_queue, 9);           // env over file
  EXPECT_EQ(server().queue_timeout_ms, 111);  // file over default
  EXPECT_EQ(server().port, 9001);
  EXPECT_EQ(model().path, "from-file.gguf");
  EXPECT_EQ(model().served_name(), "from-file");
  EXPECT_EQ(server().host, "127.0.0.1");  // default
  EXPECT_EQ(server().request_timeout_ms, 0);
}

TEST_F(ConfigPrecedence, CudaVisibleDevicesIsRecordedUnderItsOwnName) {
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  ASSERT_TRUE(parse({"-m", "m.gguf"}).is_ok());
  EXPECT_FALSE(server().cuda_visible_devices.has_value());

  env_.set("CUDA_VISIBLE_DEVICES", "GPU-5e1f,3");
  CLI::App other{"test"};
  ServiceConfig other_config;
  add_service_options(other, other_config);
  other.parse(std::vector<std::string>{"m.gguf", "-m"});
  ASSERT_TRUE(finalize_service_config(other, other_config).is_ok());
  EXPECT_EQ(other_config.server.cuda_visible_devices, "GPU-5e1f,3");
}

TEST_F(ConfigPrecedence, ConfigPathItselfFromEnv) {
  write_config(R"({"model": "m.gguf", "api-key": ["k1", "k2"], "host": "0.0.0.0"})");
  env_.set("LLAMASERVE_CONFIG", config_path_.string());
  Status status = parse({});
  ASSERT_TRUE(status.is_ok()) << status.to_string();
  EXPECT_EQ(server().api_keys, (std::vector<std::string>{"k1", "k2"}));
  EXPECT_EQ(server().host, "0.0.0.0");
}

TEST_F(ConfigPrecedence, RepeatableFlagReplacesFileList) {
  write_config(R"({"model": "m.gguf", "api-key": ["file-key"]})");
  Status status = parse({"--config", config_path_.string(), "--api-key", "a", "--api-key", "b"});
  ASSERT_TRUE(status.is_ok()) << status.to_string();
  EXPECT_EQ(server().api_keys, (std::vector<std::string>{"a", "b"}));
}

TEST_F(ConfigPrecedence, UnknownKeyIsAnError) {
  write_config(R"({"model": "m.gguf", "max-runnning": 3})");
  Status status = parse({"--config", config_path_.string()});
  ASSERT_FALSE(status.is_ok());
  EXPECT_NE(status.message().find("max-runnning"), std::string::npos) << status.message();
}

TEST_F(ConfigPrecedence, BadValueNamesTheKey) {
  write_config(R"({"model": "m.gguf", "max-running": "many"})");
  Status status = parse({"--config", config_path_.string()});
  ASSERT_FALSE(status.is_ok());
  EXPECT_NE(status.message().find("max-running"), std::string::npos) << status.message();

  write_config(R"({"model": "m.gguf", "port": 70000})");
  CLI::App other{"test"};
  ServiceConfig other_options;
  add_service_options(other, other_options);
  other.parse(std::vector<std::string>{config_path_.string(), "--config"});
  EXPECT_FALSE(finalize_service_config(other, other_options).is_ok());
}

TEST_F(ConfigPrecedence, ArrayForSingleValueAndNestedObjectsRejected) {
  write_config(R"({"model": ["a", "b"]})");
  EXPECT_FALSE(parse({"--config", config_path_.string()}).is_ok());
}

TEST_F(ConfigPrecedence, MissingModelAndTooFewHttpThreads) {
  Status no_model = parse({});
  ASSERT_FALSE(no_model.is_ok());
  EXPECT_NE(no_model.message().find("--model"), std::string::npos);

  CLI::App other{"test"};
  ServiceConfig other_options;
  add_service_options(other, other_options);
  other.parse(std::vector<std::string>{"10", "--http-threads", "8", "--max-queue", "4",
                                       "--max-running", "m.gguf", "-m"});
  Status threads = finalize_service_config(other, other_options);
  ASSERT_FALSE(threads.is_ok());
  EXPECT_NE(threads.message().find("--http-threads"), std::string::npos);
}

TEST_F(ConfigPrecedence, DerivedHttpThreadsAndApiKeyFile) {
  const auto key_file = config_path_.string() + ".keys";
  std::ofstream(key_file) << "# keys\n\n  secret-one  \nsecret-two\n";
  Status status = parse({"-m", "x.gguf", "--max-running", "2", "--max-queue", "3", "--api-key-file",
                         key_file, "--api-key", "inline"});
  std::filesystem::remove(key_file);
  ASSERT_TRUE(status.is_ok()) << status.to_string();
  EXPECT_EQ(server().http_threads, 2 + 3 + 16);
  EXPECT_EQ(server().api_keys, (std::vector<std::string>{"inline", "secret-one", "secret-two"}));
}

TEST_F(ConfigPrecedence, ParallelismFlagsEnvAndFile) {
  write_config(R"({"model": "m.gguf", "replicas": 2, "layer-split": [10, 20], "pp": 2})");
  env_.set("LLAMASERVE_TP", "2");
  env_.set("LLAMASERVE_DEVICES", "0,1,2,3,4,5,6,7");
  Status status = parse({"--config", config_path_.string()});
  ASSERT_TRUE(status.is_ok()) << status.to_string();
  EXPECT_EQ(model().layout.replicas, 2);
  EXPECT_EQ(model().layout.tensor_parallel, 2);
  EXPECT_EQ(model().layout.pipeline_parallel, 2);
  EXPECT_EQ(model().layout.layer_split, (std::vector<int32_t>{10, 20}));
  EXPECT_EQ(config_.admission_limit(), 2 * 4 + 32);
  EXPECT_EQ(server().http_threads, 2 * 4 + 32 + 16);
  ExecutorOptions base = executor_options(model(), 0);
  EXPECT_EQ(base.device, "0,1,2,3,4,5,6,7");
  EXPECT_EQ(base.tensor_parallel, 2);
  EXPECT_EQ(base.pipeline_parallel, 2);
  EXPECT_EQ(base.layer_split, (std::vector<int32_t>{10, 20}));
}

TEST_F(ConfigPrecedence, LayerSplitIsACommaList) {
  Status status =
      parse({"-m", "m.gguf", "--devices", "0,1,2", "--pp", "3", "--layer-split", "8,8,14"});
  ASSERT_TRUE(status.is_ok()) << status.to_string();
  EXPECT_EQ(model().layout.layer_split, (std::vector<int32_t>{8, 8, 14}));
}

TEST_F(ConfigPrecedence, LayerSplitFromEnv) {
  env_.set("LLAMASERVE_LAYER_SPLIT", "16,16");
  Status status = parse({"-m", "m.gguf", "--devices", "0,1", "--pp", "2"});
  ASSERT_TRUE(status.is_ok()) << status.to_string();
  EXPECT_EQ(model().layout.layer_split, (std::vector<int32_t>{16, 16}));
}

TEST_F(ConfigPrecedence, LayerSplitAsAStringInTheFile) {
  write_config(R"({"model": "m.gguf", "devices": "0,1", "pp": 2, "layer-split": "12,18"})");
  Status status = parse({"--config", config_path_.string()});
  ASSERT_TRUE(status.is_ok()) << status.to_string();
  EXPECT_EQ(model().layout.layer_split, (std::vector<int32_t>{12, 18}));
}

TEST_F(ConfigPrecedence, MicroBatchesReachTheExecutorOptions) {
  EXPECT_EQ(executor_options(ModelSpec{}, 0).pipeline_micro_batches, 0);  // one per stage
  env_.set("LLAMASERVE_MICRO_BATCHES", "1");
  Status status = parse({"-m", "m.gguf", "--devices", "0,1", "--pp", "2"});
  ASSERT_TRUE(status.is_ok()) << status.to_string();
  EXPECT_EQ(model().layout.micro_batches, 1);
  EXPECT_EQ(executor_options(model(), 0).pipeline_micro_batches, 1);
}

TEST_F(ConfigPrecedence, MicroBatchesFlagBeatsTheFile) {
  write_config(R"({"model": "m.gguf", "devices": "0,1", "pp": 2, "micro-batches": 3})");
  Status status = parse({"--config", config_path_.string(), "--micro-batches", "4"});
  ASSERT_TRUE(status.is_ok()) << status.to_string();
  EXPECT_EQ(executor_options(model(), 0).pipeline_micro_batches, 4);
}

TEST_F(ConfigPrecedence, CpuIsaReachesTheExecutorOptions) {
  EXPECT_EQ(executor_options(ModelSpec{}, 0).cpu_isa, cpu::CpuIsa::kAuto);
  write_config(R"({"model": "m.gguf", "cpu-isa": "avx2"})");
  Status status = parse({"--config", config_path_.string()});
  ASSERT_TRUE(status.is_ok()) << status.to_string();
  EXPECT_EQ(model().layout.cpu_isa, cpu::CpuIsa::kAvx2);
  EXPECT_EQ(executor_options(model(), 0).cpu_isa, cpu::CpuIsa::kAvx2);
}

// 0 turns the warm-up off, from the file as from the flag; more than 64 is refused.
TEST_F(ConfigPrecedence, WarmupTokensZeroTurnsTheWarmUpOff) {
  write_config(R"({"model": "m.gguf", "warmup-tokens": 0})");
  Status status = parse({"--config", config_path_.string()});
  ASSERT_TRUE(status.is_ok()) << status.to_string();
  EXPECT_EQ(model().warmup_tokens, 0);
  CLI::App app{"test"};
  ServiceConfig options;
  add_service_options(app, options);
  EXPECT_THROW(app.parse(std::vector<std::string>{"65", "--warmup-tokens", "m.gguf", "-m"}),
               CLI::ParseError);
}

TEST_F(ConfigPrecedence, CpuIsaFlagBeatsEnv) {
  env_.set("LLAMASERVE_CPU_ISA", "avx2");
  Status status = parse({"-m", "m.gguf", "--cpu-isa", "auto"});
  ASSERT_TRUE(status.is_ok()) << status.to_string();
  EXPECT_EQ(model().layout.cpu_isa, cpu::CpuIsa::kAuto);
  CLI::App app{"test"};
  ServiceConfig options;
  add_service_options(app, options);
  EXPECT_THROW(app.parse(std::vector<std::string>{"amx", "--cpu-isa", "m.gguf", "-m"}),
               CLI::ParseError);
  CLI::App avx512{"test"};
  ServiceConfig avx512_options;
  add_service_options(avx512, avx512_options);
  avx512.parse(std::vector<std::string>{"avx512", "--cpu-isa", "m.gguf", "-m"});
  EXPECT_EQ(avx512_options.models.at(0).layout.cpu_isa, cpu::CpuIsa::kAvx512);
}

// Each case is checked before the model loads, with a message that names what is wrong.
TEST(ServerOptionsCheck, BadParallelCombinations) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--tp", "2"}, "CUDA devices"},
      {{"--pp", "2", "--devices", "cpu"}, "CUDA devices"},
      {{"--replicas", "3", "--devices", "0,1"}, "need 3 devices"},
      {{"--tp", "2", "--replicas", "2", "--devices", "0,1"}, "need 4 devices"},
      {{"--devices", "0,0"}, "twice"},
      {{"--devices", "0,1", "--pp", "2", "--layer-split", "8,8,8"}, "--layer-split lists 3"},
  };
  for (const auto& [flags, expected] : cases) {
    CLI::App app{"test"};
    ServiceConfig options;
    add_service_options(app, options);
    std::vector<std::string> args = {"-m", "m.gguf"};
    args.insert(args.end(), flags.begin(), flags.end());
    std::reverse(args.begin(), args.end());
    app.parse(args);
    Status status = finalize_service_config(app, options);
    ASSERT_FALSE(status.is_ok()) << fmt::format("{}", fmt::join(flags, " "));
    EXPECT_NE(status.message().find(expected), std::string::npos) << status.message();
  }
  for (const char* zero : {"--replicas", "--tp", "--pp"}) {
    CLI::App app{"test"};
    ServiceConfig options;
    add_service_options(app, options);
    EXPECT_THROW(app.parse(std::vector<std::string>{"0", zero, "m.gguf", "-m"}), CLI::ParseError)
        << zero;
  }
  for (const char* bad : {"-1", "65"}) {
    CLI::App app{"test"};
    ServiceConfig options;
    add_service_options(app, options);
    EXPECT_THROW(app.parse(std::vector<std::string>{bad, "--micro-batches", "m.gguf", "-m"}),
                 CLI::ParseError)
        << bad;
  }
}

// --tp-rank 0: the server is rank 0 of a group of processes on one CUDA device; the flags,
// their variables and what the executor gets.
TEST_F(ConfigPrecedence, TensorParallelProcessFlags) {
  env_.set("LLAMASERVE_TP_LISTEN", "29600");
  Status status = parse({"-m", "m.gguf", "--device", "cuda:1", "--tp", "4", "--tp-rank", "0"});
  ASSERT_TRUE(status.is_ok()) << status.to_string();
  const TpProcessOptions process = tp_process_options(model().layout);
  EXPECT_EQ(process.rank, 0);
  EXPECT_EQ(process.listen_port, 29600);
  EXPECT_EQ(process.rendezvous_timeout_ms, 600000);
  EXPECT_EQ(tp_process_device(executor_options(model(), 0), process).value(), 1);
  EXPECT_EQ(executor_options(model(), 0).tensor_parallel, 4);
}

TEST(ServerOptionsCheck, BadTensorParallelProcessCombinations) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--tp", "2", "--tp-rank", "1", "--devices", "0"}, "the server is rank 0 of its"},
      {{"--tp", "2", "--tp-rank", "0", "--replicas", "2", "--devices", "0"},
       "serves one replica, the group's; --replicas is 2"},
      {{"--tp-rank", "0", "--devices", "0"}, "needs --tp 2 or more"},
      {{"--tp", "2", "--pp", "2", "--tp-rank", "0", "--devices", "0"}, "no pipeline stages"},
      {{"--tp", "2", "--tp-rank", "0", "--devices", "0,1"}, "one CUDA device"},
      {{"--tp", "2", "--tp-rank", "0"}, "one CUDA device (--device cuda:N), not 'cpu'"},
      // Without --tp-rank, --tp still means ranks as threads on the listed devices.
      {{"--tp", "2", "--devices", "0"}, "need 2 devices"},
  };
  for (const auto& [flags, expected] : cases) {
    CLI::App app{"test"};
    ServiceConfig options;
    add_service_options(app, options);
    std::vector<std::string> args = {"-m", "m.gguf"};
    args.insert(args.end(), flags.begin(), flags.end());
    std::reverse(args.begin(), args.end());
    app.parse(args);
    Status status = finalize_service_config(app, options);
    ASSERT_FALSE(status.is_ok()) << fmt::format("{}", fmt::join(flags, " "));
    EXPECT_NE(status.message().find(expected), std::string::npos) << status.message();
  }
  CLI::App app{"test"};
  ServiceConfig options;
  add_service_options(app, options);
  EXPECT_THROW(app.parse(std::vector<std::string>{"0", "--tp-listen", "m.gguf", "-m"}),
               CLI::ParseError);
}

TEST(EnvVarName, FromLongName) {
  EXPECT_EQ(env_var_name("LLAMASERVE_", "max-running"), "LLAMASERVE_MAX_RUNNING");
  EXPECT_EQ(env_var_name("LLAMASERVE_", "api-key-file"), "LLAMASERVE_API_KEY_FILE");
}

TEST(ApplyJsonConfig, BooleanFlagsAndNumbers) {
  CLI::App app{"test"};
  bool verbose = false;
  double ratio = 0;
  app.add_flag("--verbose", verbose);
  app.add_option("--ratio", ratio);
  app.parse(std::vector<std::string>{});
  Status status = apply_json_config(app, {{"verbose", true}, {"ratio", 0.25}}, "test");
  ASSERT_TRUE(status.is_ok()) << status.to_string();
  EXPECT_TRUE(verbose);
  EXPECT_DOUBLE_EQ(ratio, 0.25);
  EXPECT_FALSE(apply_json_config(app, nlohmann::json::array(), "test").is_ok());
  EXPECT_FALSE(apply_json_config(app, {{"ratio", {{"nested", 1}}}}, "test").is_ok());
}

TEST(ApplyJsonConfig, ProgramOptionsFromACommandsFile) {
  CLI::App app{"test"};
  std::string level = "info";
  app.add_option("--log-level", level);
  app.add_flag("--version");
  CLI::App* serve = app.add_subcommand("serve");
  int port = 0;
  serve->add_option("--port", port);
  app.parse(std::vector<std::string>{"serve"});
  Status status = apply_json_config(*serve, {{"log-level", "warn"}, {"port", 9}}, "test");
  ASSERT_TRUE(status.is_ok()) << status.to_string();
  EXPECT_EQ(level, "warn");
  EXPECT_EQ(port, 9);
  EXPECT_FALSE(apply_json_config(*serve, {{"version", true}}, "test").is_ok());
}

TEST(ApplyJsonConfig, ProgramOptionSetOnTheCommandLineWins) {
  CLI::App app{"test"};
  std::string level = "info";
  app.add_option("--log-level", level);
  CLI::App* serve = app.add_subcommand("serve");
  app.parse("--log-level debug serve", false);
  ASSERT_TRUE(apply_json_config(*serve, {{"log-level", "warn"}}, "test").is_ok());
  EXPECT_EQ(level, "debug");
}

}  // namespace
}  // namespace llamaserve::server
