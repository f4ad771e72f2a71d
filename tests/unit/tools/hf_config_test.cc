// config.json → ModelConfig for the supported architectures and RoPE encodings, and the
// refusals with messages that name the problem.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "model/importers/hf_config.h"

namespace llamaserve {
namespace {

using json = nlohmann::json;

json llama2_7b() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"hidden_size", 4096},
          {"intermediate_size", 11008},
          {"num_hidden_layers", 32},
          {"num_attention_heads", 32},
          {"num_key_value_heads", 32},
          {"max_position_embeddings", 4096},
          {"rms_norm_eps", 1e-5},
          {"vocab_size", 32000},
          {"bos_token_id", 1},
          {"eos_token_id", 2},
          {"hidden_act", "silu"},
          {"tie_word_embeddings", false},
          {"rope_theta", 10000.0},
          {"rope_scaling", nullptr}};
}

std::string error_of(const json& config) {
  auto parsed = parse_hf_config(config.dump());
  EXPECT_FALSE(parsed.is_ok());
  return parsed.is_ok() ? "" : parsed.status().message();
}

TEST(HfConfigTest, Llama2) {
  auto hf = parse_hf_config(llama2_7b().dump());
  ASSERT_TRUE(hf.is_ok()) << hf.status().to_string();
  const ModelConfig& c = hf->config;
  EXPECT_EQ(c.arch, "llama");
  EXPECT_EQ(c.n_embd, 4096);
  EXPECT_EQ(c.n_layer, 32);
  EXPECT_EQ(c.n_head_kv, 32);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.rope_dim, 128);
  EXPECT_EQ(c.n_ff, 11008);
  EXPECT_EQ(c.n_vocab, 32000);
  EXPECT_EQ(c.n_ctx_train, 4096);
  EXPECT_FLOAT_EQ(c.norm_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kNone);
  EXPECT_FALSE(c.tied_output);
  EXPECT_EQ(hf->bos_token_id, 1);
  EXPECT_EQ(hf->eos_token_id, 2);
}

TEST(HfConfigTest, Llama31ScalingClassicAndRopeParameters) {
  json classic = llama2_7b();
  classic["num_key_value_heads"] = 8;
  classic["rope_theta"] = 500000.0;
  classic["eos_token_id"] = {128001, 128008, 128009};
  classic["rope_scaling"] = {{"factor", 8.0},
                             {"low_freq_factor", 1.0},
                             {"high_freq_factor", 4.0},
                             {"original_max_position_embeddings", 8192},
                             {"rope_type", "llama3"}};
  json params = classic;
  params.erase("rope_theta");
  params.erase("rope_scaling");
  params["rope_parameters"] = classic["rope_scaling"];
  params["rope_parameters"]["rope_theta"] = 500000.0;
  for (const json& config : {classic, params}) {
    auto hf = parse_hf_config(config.dump());
    ASSERT_TRUE(hf.is_ok()) << hf.status().to_string();
    const RopeScaling& s = hf->config.rope_scaling;
    EXPECT_EQ(s.type, RopeScalingType::kLlama3);
    EXPECT_FLOAT_EQ(s.factor, 8.0f);
    EXPECT_FLOAT_EQ(s.high_freq_factor, 4.0f);
    EXPECT_EQ(s.original_context_length, 8192);
    EXPECT_FLOAT_EQ(hf->config.rope_theta, 500000.0f);
    EXPECT_EQ(hf->eos_token_id, 128001);
  }
  json linear = llama2_7b();
  linear["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  auto hf = parse_hf_config(linear.dump());
  ASSERT_TRUE(hf.is_ok()) << hf.status().to_string();
  EXPECT_EQ(hf->config.rope_scaling.type, RopeScalingType::kLinear);
  EXPECT_FLOAT_EQ(hf->config.rope_scaling.factor, 2.0f);
}

TEST(HfConfigTest, MistralAndSmolLM2Shapes) {
  json mistral = llama2_7b();
  mistral["architectures"] = {"MistralForCausalLM"};
  mistral["num_key_value_heads"] = 8;
  mistral["intermediate_size"] = 14336;
  mistral["sliding_window"] = 4096;
  mistral.erase("max_position_embeddings");
  auto m = parse_hf_config(mistral.dump());
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(m->config.group_size(), 4);
  EXPECT_EQ(m->sliding_window, 4096);
  EXPECT_EQ(m->config.n_ctx_train, 131072);  // transformers' MistralConfig default

  json smol = {{"architectures", {"LlamaForCausalLM"}},
               {"hidden_size", 576},
               {"intermediate_size", 1536},
               {"num_hidden_layers", 30},
               {"num_attention_heads", 9},
               {"num_key_value_heads", 3},
               {"vocab_size", 49152},
               {"tie_word_embeddings", true},
               {"rope_theta", 100000},
               {"max_position_embeddings", 8192},
               {"rms_norm_eps", 1e-5},
               {"head_dim", 64}};
  auto s = parse_hf_config(smol.dump());
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_TRUE(s->config.tied_output);
  EXPECT_EQ(s->config.head_dim, 64);
  EXPECT_FLOAT_EQ(s->config.rope_theta, 100000.0f);
}

TEST(HfConfigTest, RefusesUnsupportedOrBrokenConfigs) {
  json gpt2 = llama2_7b();
  gpt2["architectures"] = {"GPT2LMHeadModel"};
  EXPECT_NE(error_of(gpt2).find("architecture 'GPT2LMHeadModel' is not supported"),
            std::string::npos);
  json qwen = llama2_7b();
  qwen["architectures"] = {"Qwen2ForCausalLM"};
  EXPECT_NE(error_of(qwen).find("LlamaForCausalLM, MistralForCausalLM"), std::string::npos);
  json no_arch = llama2_7b();
  no_arch.erase("architectures");
  EXPECT_NE(error_of(no_arch).find("names no architecture"), std::string::npos);
  no_arch["model_type"] = "llama";
  EXPECT_TRUE(parse_hf_config(no_arch.dump()).is_ok());

  json missing = llama2_7b();
  missing.erase("hidden_size");
  EXPECT_NE(error_of(missing).find("missing key 'hidden_size'"), std::string::npos);
  json wrong_type = llama2_7b();
  wrong_type["num_hidden_layers"] = "32";
  EXPECT_NE(error_of(wrong_type).find("'num_hidden_layers' should be an integer"),
            std::string::npos);
  json yarn = llama2_7b();
  yarn["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}};
  EXPECT_NE(error_of(yarn).find("'yarn' is not supported"), std::string::npos);
  json gelu = llama2_7b();
  gelu["hidden_act"] = "gelu";
  EXPECT_NE(error_of(gelu).find("hidden_act"), std::string::npos);
  json bias = llama2_7b();
  bias["attention_bias"] = true;
  EXPECT_NE(error_of(bias).find("attention_bias"), std::string::npos);
  json gqa = llama2_7b();
  gqa["num_key_value_heads"] = 5;
  EXPECT_NE(error_of(gqa).find("not divisible"), std::string::npos);
  json heads = llama2_7b();
  heads["num_attention_heads"] = 0;
  EXPECT_FALSE(error_of(heads).empty());
  EXPECT_FALSE(parse_hf_config("[1]").is_ok());
  EXPECT_FALSE(parse_hf_config("{\"architectures\": 3}").is_ok());
  EXPECT_FALSE(read_hf_config("/nonexistent-dir").is_ok());
}

}  // namespace
}  // namespace llamaserve
