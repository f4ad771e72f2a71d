// Hugging Face directory conversion on a hand-made checkpoint: name mapping, the Q/K row
// permutation, dtype conversion, tied embeddings, LLaMA 3 rope_freqs, and every refusal
// leaving no output file.
#include <gtest/gtest.h>

#include "gguf/gguf.h"
#include "model/importers/convert.h"
#include "model/importers/llama_tensors.h"
#include "model/weights.h"
#include "quant/quant.h"
#include "tokenizer/tokenizer_data.h"
#include "tools_test_util.h"

namespace llamaserve {
namespace {

using json = nlohmann::json;
using namespace tools_test;

constexpr int kEmbd = 64, kLayers = 2, kHeads = 4, kKvHeads = 2, kFf = 96, kVocab = 10;
constexpr int kHeadDim = kEmbd / kHeads;

json base_config() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"hidden_size", kEmbd},
          {"intermediate_size", kFf},
          {"num_hidden_layers", kLayers},
          {"num_attention_heads", kHeads},
          {"num_key_value_heads", kKvHeads},
          {"vocab_size", kVocab},
          {"max_position_embeddings", 256},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 10000.0},
          {"tie_word_embeddings", false}};
}

json toy_tokenizer() {
  return {{"added_tokens", json::array({{{"id", 5}, {"content", "<s>"}, {"special", true}}})},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"use_regex", true}}},
          {"model",
           {{"type", "BPE"},
            {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}, {"c", 3}, {"abc", 4}}},
            {"merges", json::array({"a b", "ab c"})}}}};
}

// HF tensors: name -> (shape, values); the values are kept to compare with the output.
struct HfModel {
  std::map<std::string, std::vector<float>> values;
  std::vector<StTensor> tensors;

  void add(const std::string& name, std::vector<int64_t> shape, const std::string& dtype = "F32") {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    std::vector<float> v = random_floats(n, static_cast<uint32_t>(values.size() + 1));
    std::vector<uint8_t> bytes;
    if (dtype == "F32") {
      bytes = f32_bytes(v);
    } else {
      // F16 / BF16 through the reference codecs; the expected values are the rounded ones.
      const TensorType type = dtype == "F16" ? TensorType::F16 : TensorType::BF16;
      bytes.resize(n * 2);
      EXPECT_TRUE(quantize_row(type, v.data(), bytes.data(), static_cast<int64_t>(n)).is_ok());
      EXPECT_TRUE(dequantize_row(type, bytes.data(), v.data(), static_cast<int64_t>(n)).is_ok());
    }
    values[name] = v;
    tensors.push_back({name, dtype, std::move(shape), std::move(bytes)});
  }
};

HfModel make_model(bool with_lm_head) {
  HfModel m;
  m.add("model.embed_tokens.weight", {kVocab, kEmbd}, "BF16");
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    m.add(p + "input_layernorm.weight", {kEmbd});
    m.add(p + "self_attn.q_proj.weight", {kHeads * kHeadDim, kEmbd}, "F16");
    m.add(p + "self_attn.k_proj.weight", {kKvHeads * kHeadDim, kEmbd});
    m.add(p + "self_attn.v_proj.weight", {kKvHeads * kHeadDim, kEmbd});
    m.add(p + "self_attn.o_proj.weight", {kEmbd, kHeads * kHeadDim});
    m.add(p + "post_attention_layernorm.weight", {kEmbd});
    m.add(p + "mlp.gate_proj.weight", {kFf, kEmbd});
    m.add(p + "mlp.up_proj.weight", {kFf, kEmbd});
    m.add(p + "mlp.down_proj.weight", {kEmbd, kFf});
  }
  m.add("model.norm.weight", {kEmbd});
  if (with_lm_head) m.add("lm_head.weight", {kVocab, kEmbd});
  return m;
}

void write_dir(const fs::path& dir, const json& config, const HfModel& model) {
  write_text(dir / "config.json", config.dump());
  write_text(dir / "tokenizer.json", toy_tokenizer().dump());
  write_text(dir / "tokenizer_config.json",
             R"({"bos_token": "<s>", "eos_token": "<s>", "chat_template": "{{x}}"})");
  write_safetensors(dir / "model.safetensors", model.tensors);
}

ConvertOptions f32_options(const TempDir& dir) {
  ConvertOptions o;
  o.output_path = dir.file("out.gguf");
  o.type = "f32";
  o.threads = 2;
  o.progress = ProgressStyle::kSilent;
  return o;
}

std::vector<float> gguf_row(const GgufFile& f, const std::string& name, uint64_t row) {
  const GgufTensorInfo* t = f.find_tensor(name);
  EXPECT_NE(t, nullptr) << name;
  const int64_t cols = static_cast<int64_t>(t->dims[0]);
  std::vector<float> out(static_cast<size_t>(cols));
  EXPECT_TRUE(
      dequantize_row(t->type, f.tensor_data(*t) + row * row_bytes(t->type, cols), out.data(), cols)
          .is_ok());
  return out;
}

std::vector<float> hf_row(const HfModel& m, const std::string& name, int64_t row, int64_t cols) {
  const std::vector<float>& v = m.values.at(name);
  return std::vector<float>(v.begin() + row * cols, v.begin() + (row + 1) * cols);
}

TEST(HfConvertTest, MapsNamesPermutesQkAndKeepsValues) {
  TempDir dir;
  const fs::path model_dir = dir.path() / "my-model";
  fs::create_directories(model_dir);
  const HfModel m = make_model(true);
  write_dir(model_dir, base_config(), m);
  auto summary = convert_hf_model(model_dir.string() + "/", f32_options(dir));
  ASSERT_TRUE(summary.is_ok()) << summary.status().to_string();
  EXPECT_EQ(summary->tokenizer_pre, "gpt2");

  auto model = load_model(dir.file("out.gguf"));
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  const GgufFile& f = *(*model)->file;
  EXPECT_EQ(f.get_string("general.name"), "my-model");
  EXPECT_EQ(f.get_int("general.file_type"), 0);
  EXPECT_EQ((*model)->config.n_head_kv, kKvHeads);
  EXPECT_FALSE((*model)->config.tied_output);

  const std::vector<int64_t> q_map = hf_to_gguf_rope_rows(kHeads, kHeadDim);
  const std::vector<int64_t> k_map = hf_to_gguf_rope_rows(kKvHeads, kHeadDim);
  for (int64_t r = 0; r < kHeads * kHeadDim; ++r) {
    ASSERT_EQ(gguf_row(f, "blk.1.attn_q.weight", r),
              hf_row(m, "model.layers.1.self_attn.q_proj.weight", q_map[r], kEmbd))
        << r;
  }
  for (int64_t r = 0; r < kKvHeads * kHeadDim; ++r) {
    ASSERT_EQ(gguf_row(f, "blk.0.attn_k.weight", r),
              hf_row(m, "model.layers.0.self_attn.k_proj.weight", k_map[r], kEmbd))
        << r;
    ASSERT_EQ(gguf_row(f, "blk.0.attn_v.weight", r),
              hf_row(m, "model.layers.0.self_attn.v_proj.weight", r, kEmbd))
        << r;
  }
  EXPECT_EQ(gguf_row(f, "token_embd.weight", 9), hf_row(m, "model.embed_tokens.weight", 9, kEmbd));
  EXPECT_EQ(gguf_row(f, "blk.1.ffn_down.weight", 3),
            hf_row(m, "model.layers.1.mlp.down_proj.weight", 3, kFf));
  EXPECT_EQ(gguf_row(f, "output.weight", 4), hf_row(m, "lm_head.weight", 4, kEmbd));
  EXPECT_EQ(gguf_row(f, "output_norm.weight", 0), hf_row(m, "model.norm.weight", 0, kEmbd));

  auto tok = tokenizer_data_from_gguf(f);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  EXPECT_EQ(tok->tokens.size(), static_cast<size_t>(kVocab));  // padded from 6
  EXPECT_EQ(tok->tokens[9], "[PAD9]");
  EXPECT_EQ(tok->merges, (std::vector<std::string>{"a b", "ab c"}));
  EXPECT_EQ(tok->bos_id, 5);
  EXPECT_EQ(tok->chat_template, "{{x}}");
}

TEST(HfConvertTest, TiedEmbeddingsLlama3ScalingAndF16Output) {
  TempDir dir;
  json config = base_config();
  config["tie_word_embeddings"] = true;
  config["rope_theta"] = 500000.0;
  config["rope_scaling"] = {{"rope_type", "llama3"},
                            {"factor", 8.0},
                            {"low_freq_factor", 1.0},
                            {"high_freq_factor", 4.0},
                            {"original_max_position_embeddings", 64}};
  // A checkpoint that also saved the tied head: ignored.
  write_dir(dir.path(), config, make_model(true));
  ConvertOptions o = f32_options(dir);
  o.type = "f16";
  auto summary = convert_hf_model(dir.path().string(), o);
  ASSERT_TRUE(summary.is_ok()) << summary.status().to_string();
  auto model = load_model(dir.file("out.gguf"));
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  const GgufFile& f = *(*model)->file;
  EXPECT_TRUE((*model)->config.tied_output);
  EXPECT_EQ(f.find_tensor("output.weight"), nullptr);
  EXPECT_EQ(f.find_tensor("blk.0.ffn_up.weight")->type, TensorType::F16);
  EXPECT_EQ(f.find_tensor("blk.0.ffn_norm.weight")->type, TensorType::F32);
  EXPECT_EQ(f.get_int("general.file_type"), 1);
  ASSERT_TRUE((*model)->weights.rope_freqs.has_value());
  ModelConfig c = (*model)->config;
  c.rope_scaling = {RopeScalingType::kLlama3, 8.0f, 1.0f, 4.0f, 64};
  EXPECT_EQ(gguf_row(f, "rope_freqs.weight", 0), llama3_rope_factors(c));
}

TEST(HfConvertTest, RefusalsLeaveNoFile) {
  TempDir dir;
  const ConvertOptions o = f32_options(dir);
  const auto error_for = [&](const json& config, const HfModel& model) {
    const fs::path model_dir = dir.path() / "m";
    fs::remove_all(model_dir);
    fs::create_directories(model_dir);
    write_dir(model_dir, config, model);
    auto r = convert_hf_model(model_dir.string(), o);
    EXPECT_FALSE(r.is_ok());
    EXPECT_FALSE(fs::exists(o.output_path));
    return r.is_ok() ? std::string() : r.status().message();
  };
  json arch = base_config();
  arch["architectures"] = {"Gemma2ForCausalLM"};
  EXPECT_NE(error_for(arch, make_model(true)).find("not supported"), std::string::npos);

  HfModel missing = make_model(false);  // untied config but no lm_head
  EXPECT_NE(error_for(base_config(), missing).find("no tensor 'lm_head.weight'"),
            std::string::npos);

  HfModel wrong_shape = make_model(true);
  wrong_shape.tensors[2].shape = {kEmbd / 2, kHeads * kHeadDim * 2};
  EXPECT_NE(error_for(base_config(), wrong_shape).find("config.json implies [64, 64]"),
            std::string::npos);

  HfModel int_weights = make_model(true);
  int_weights.tensors.back().dtype = "I32";
  EXPECT_NE(error_for(base_config(), int_weights).find("dtype I32"), std::string::npos);

  HfModel bias = make_model(true);
  bias.add("model.layers.0.self_attn.q_proj.bias", {kEmbd});
  EXPECT_NE(error_for(base_config(), bias).find("q_proj.bias"), std::string::npos);

  json big_vocab = base_config();
  big_vocab["vocab_size"] = 4;  // the tokenizer has 6 tokens
  HfModel small = make_model(true);
  small.tensors.front().shape = {4, kEmbd};
  small.tensors.front().bytes.resize(4 * kEmbd * 2);
  small.tensors.back().shape = {4, kEmbd};
  small.tensors.back().bytes.resize(4 * kEmbd * 4);
  EXPECT_NE(error_for(big_vocab, small).find("only 4 rows"), std::string::npos);

  // A truncated safetensors file.
  const fs::path model_dir = dir.path() / "m";
  fs::remove_all(model_dir);
  fs::create_directories(model_dir);
  write_dir(model_dir, base_config(), make_model(true));
  auto bytes = read_bytes(model_dir / "model.safetensors");
  write_bytes(model_dir / "model.safetensors", bytes.data(), bytes.size() / 2);
  auto truncated = convert_hf_model(model_dir.string(), o);
  ASSERT_FALSE(truncated.is_ok());
  EXPECT_NE(truncated.status().message().find("truncated"), std::string::npos);
  EXPECT_FALSE(fs::exists(o.output_path));

  fs::remove(model_dir / "config.json");
  auto no_config = convert_hf_model(model_dir.string(), o);
  ASSERT_FALSE(no_config.is_ok());
  EXPECT_NE(no_config.status().message().find("config.json"), std::string::npos);
  EXPECT_FALSE(convert_hf_model(dir.file("nope"), o).is_ok());
  ConvertOptions bad_type = o;
  bad_type.type = "q2_k";
  write_dir(model_dir, base_config(), make_model(true));
  EXPECT_FALSE(convert_hf_model(model_dir.string(), bad_type).is_ok());
  EXPECT_FALSE(fs::exists(o.output_path));
}

}  // namespace
}  // namespace llamaserve
