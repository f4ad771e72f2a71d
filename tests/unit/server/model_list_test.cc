#include "server/model_list.h"

#include <gtest/gtest.h>

namespace llamaserve::server {
namespace {

ModelSpec defaults() {
  ModelSpec spec;
  spec.layout.device = "cuda:0";
  spec.engine.max_running = 8;
  spec.context_tokens = 4096;
  return spec;
}

TEST(ModelList, ArgumentsOverrideTheFlags) {
  auto spec = parse_model_arg(
      "chat=/m/a.gguf,device=1,ctx-size=2048,keep-alive=5m,required=true,"
      "load=on-demand",
      defaults());
  ASSERT_TRUE(spec) << spec.status().to_string();
  EXPECT_EQ(spec->name, "chat");
  EXPECT_EQ(spec->path, "/m/a.gguf");
  EXPECT_EQ(spec->layout.device, "1");
  EXPECT_EQ(spec->context_tokens, 2048);
  EXPECT_EQ(spec->engine.max_running, 8);  // from the flags
  EXPECT_EQ(spec->keep_alive_ms, 300000);
  EXPECT_TRUE(spec->required);
  EXPECT_FALSE(spec->load_at_start);
  auto plain = parse_model_arg("fast=/m/b.gguf", defaults());
  ASSERT_TRUE(plain);
  EXPECT_FALSE(plain->required);  // named models are optional unless they say so
  EXPECT_TRUE(plain->load_at_start);
}

TEST(ModelList, CpuIsa) {
  auto spec = parse_model_arg("a=/m/a.gguf,cpu-isa=avx2", defaults());
  ASSERT_TRUE(spec) << spec.status().to_string();
  EXPECT_EQ(spec->layout.cpu_isa, cpu::CpuIsa::kAvx2);
  auto avx512 = parse_model_arg("a=/m/a.gguf,cpu-isa=avx512", defaults());
  ASSERT_TRUE(avx512) << avx512.status().to_string();
  EXPECT_EQ(avx512->layout.cpu_isa, cpu::CpuIsa::kAvx512);
  auto bad = parse_model_arg("a=/m/a.gguf,cpu-isa=amx", defaults());
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find("expected auto, avx512 or avx2"), std::string::npos);
}

TEST(ModelList, BadArgumentsNameTheProblem) {
  for (const char* bad :
       {"/m/a.gguf", "=/m/a.gguf", "a=", "a=/m,tp", "a=/m,tp=zero", "a=/m,colour=red",
        "a=/m,load=later", "a=/m,keep-alive=5d", "a=/m,max-running=0"}) {
    auto spec = parse_model_arg(bad, defaults());
    EXPECT_FALSE(spec) << bad;
    if (!spec) {
      EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
    }
  }
}

TEST(ModelList, ConfigObjects) {
  auto spec = parse_model_object(
      {{"name", "q8"}, {"path", "/m/q8.gguf"}, {"max-running", 2}, {"required", true}}, defaults());
  ASSERT_TRUE(spec) << spec.status().to_string();
  EXPECT_EQ(spec->engine.max_running, 2);
  EXPECT_TRUE(spec->required);
  EXPECT_FALSE(parse_model_object({{"path", "/m/x.gguf"}}, defaults()));  // no name
  EXPECT_FALSE(parse_model_object({{"name", "x"}, {"path", "/m"}, {"tp", 1.5}}, defaults()));
  EXPECT_FALSE(parse_model_object(nlohmann::json::array(), defaults()));
}

}  // namespace
}  // namespace llamaserve::server
