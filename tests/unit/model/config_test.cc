// ModelConfig and weight mapping from GGUF metadata: the happy paths of both architectures
// and the errors a user gets for malformed files.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/config.h"
#include "model/weights.h"

namespace llamaserve {
namespace {

// A structurally complete tiny model; tests mutate the writer before building the file.
struct TinyModel {
  std::string arch = "llama";
  int64_t n_vocab = 64, n_embd = 32, n_layer = 2, n_head = 4, n_head_kv = 2, n_ff = 48;
  bool tied = true;
  bool biases = false;
  TensorType matrix_type = TensorType::F32;

  GgufWriter writer() const {
    GgufWriter w;
    const std::string p = arch + ".";
    w.set_string("general.architecture", arch);
    w.set_u32(p + "context_length", 256);
    w.set_u32(p + "embedding_length", static_cast<uint32_t>(n_embd));
    w.set_u32(p + "block_count", static_cast<uint32_t>(n_layer));
    w.set_u32(p + "feed_forward_length", static_cast<uint32_t>(n_ff));
    w.set_u32(p + "attention.head_count", static_cast<uint32_t>(n_head));
    w.set_u32(p + "attention.head_count_kv", static_cast<uint32_t>(n_head_kv));
    w.set_f32(p + "rope.freq_base", 10000.0f);
    w.set_f32(p + "attention.layer_norm_rms_epsilon", 1e-5f);
    const int64_t head_dim = n_embd / n_head;
    const int64_t kv_dim = n_head_kv * head_dim;
    add(w, "token_embd.weight", matrix_type, n_vocab, n_embd);
    for (int64_t l = 0; l < n_layer; ++l) {
      const std::string b = "blk." + std::to_string(l) + ".";
      add(w, b + "attn_norm.weight", TensorType::F32, 0, n_embd);
      add(w, b + "attn_q.weight", matrix_type, n_embd, n_embd);
      add(w, b + "attn_k.weight", matrix_type, kv_dim, n_embd);
      add(w, b + "attn_v.weight", matrix_type, kv_dim, n_embd);
      add(w, b + "attn_output.weight", matrix_type, n_embd, n_embd);
      if (biases) {
        add(w, b + "attn_q.bias", TensorType::F32, 0, n_embd);
        add(w, b + "attn_k.bias", TensorType::F32, 0, kv_dim);
        add(w, b + "attn_v.bias", TensorType::F32, 0, kv_dim);
      }
      add(w, b + "ffn_norm.weight", TensorType::F32, 0, n_embd);
      add(w, b + "ffn_gate.weight", matrix_type, n_ff, n_embd);
      add(w, b + "ffn_up.weight", matrix_type, n_ff, n_embd);
      add(w, b + "ffn_down.weight", matrix_type, n_embd, n_ff);
    }
    add(w, "output_norm.weight", TensorType::F32, 0, n_embd);
    if (!tied) add(w, "output.weight", matrix_type, n_vocab, n_embd);
    return w;
  }

  // rows == 0: a vector of `cols`.
  static void add(GgufWriter& w, const std::string& name, TensorType type, int64_t rows,
                  int64_t cols) {
    std::vector<uint64_t> dims = {static_cast<uint64_t>(cols)};
    if (rows > 0) dims.push_back(static_cast<uint64_t>(rows));
    const size_t bytes =
        row_bytes(type, static_cast<size_t>(cols)) * static_cast<size_t>(rows > 0 ? rows : 1);
    ASSERT_TRUE(w.add_tensor(name, type, dims, std::vector<uint8_t>(bytes, 0)).is_ok()) << name;
  }
};

// Keeps the file image alive as long as the parsed file.
struct Parsed {
  std::vector<uint8_t> image;
  std::unique_ptr<GgufFile> file;
};

Parsed parse(const GgufWriter& w) {
  Parsed p;
  auto bytes = w.to_bytes();
  EXPECT_TRUE(bytes.is_ok()) << bytes.status().to_string();
  p.image = std::move(bytes).value();
  auto file = GgufFile::parse(p.image.data(), p.image.size());
  EXPECT_TRUE(file.is_ok()) << file.status().to_string();
  if (file.is_ok()) p.file = std::move(file).value();
  return p;
}

TEST(ModelConfig, ReadsLlamaMetadata) {
  TinyModel m;
  GgufWriter w = m.writer();
  Parsed p = parse(w);
  auto config = model_config_from_gguf(*p.file);
  ASSERT_TRUE(config.is_ok()) << config.status().to_string();
  EXPECT_EQ(config->arch, "llama");
  EXPECT_EQ(config->n_vocab, 64);
  EXPECT_EQ(config->n_embd, 32);
  EXPECT_EQ(config->n_layer, 2);
  EXPECT_EQ(config->n_head, 4);
  EXPECT_EQ(config->n_head_kv, 2);
  EXPECT_EQ(config->head_dim, 8);
  EXPECT_EQ(config->rope_dim, 8);
  EXPECT_EQ(config->n_ff, 48);
  EXPECT_EQ(config->n_ctx_train, 256);
  EXPECT_EQ(config->rope_ordering, RopeOrdering::kNormal);
  EXPECT_EQ(config->rope_scaling.type, RopeScalingType::kNone);
  EXPECT_TRUE(config->tied_output);
  EXPECT_FALSE(config->attn_bias);
  EXPECT_FLOAT_EQ(config->norm_eps, 1e-5f);
  // K and V, 2 layers, 2 KV heads of 8, f16.
  EXPECT_EQ(kv_bytes_per_token(*config, TensorType::F16), 2u * 2 * 16 * 2);
  EXPECT_EQ(kv_bytes_per_token(*config, TensorType::F32), 2u * 2 * 16 * 4);

  auto weights = map_weights(*p.file, *config);
  ASSERT_TRUE(weights.is_ok()) << weights.status().to_string();
  EXPECT_EQ(weights->layers.size(), 2u);
  EXPECT_EQ(weights->output.data, weights->token_embd.data);  // tied
  EXPECT_EQ(weights->layers[1].wk.shape, (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(weights->layers[0].attn_norm.shape, (std::vector<int64_t>{32}));
  EXPECT_FALSE(weights->layers[0].bq.has_value());
}

TEST(ModelConfig, ReadsQwen2WithBiasesAndNeoxRope) {
  TinyModel m;
  m.arch = "qwen2";
  m.biases = true;
  m.tied = false;
  GgufWriter w = m.writer();
  Parsed p = parse(w);
  auto config = model_config_from_gguf(*p.file);
  ASSERT_TRUE(config.is_ok()) << config.status().to_string();
  EXPECT_EQ(config->rope_ordering, RopeOrdering::kNeox);
  EXPECT_TRUE(config->attn_bias);
  EXPECT_FALSE(config->tied_output);
  auto weights = map_weights(*p.file, *config);
  ASSERT_TRUE(weights.is_ok()) << weights.status().to_string();
  ASSERT_TRUE(weights->layers[0].bk.has_value());
  EXPECT_EQ(weights->layers[0].bk->shape, (std::vector<int64_t>{16}));
  EXPECT_NE(weights->output.data, weights->token_embd.data);
}

TEST(ModelConfig, ReadsRopeScaling) {
  TinyModel m;
  GgufWriter w = m.writer();
  w.set_string("llama.rope.scaling.type", "llama3");
  w.set_f32("llama.rope.scaling.factor", 8.0f);
  w.set_f32("llama.rope.scaling.low_freq_factor", 1.0f);
  w.set_f32("llama.rope.scaling.high_freq_factor", 4.0f);
  w.set_u32("llama.rope.scaling.original_context_length", 8192);
  Parsed p = parse(w);
  auto config = model_config_from_gguf(*p.file);
  ASSERT_TRUE(config.is_ok()) << config.status().to_string();
  EXPECT_EQ(config->rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_FLOAT_EQ(config->rope_scaling.factor, 8.0f);
  EXPECT_EQ(config->rope_scaling.original_context_length, 8192);

  w.set_string("llama.rope.scaling.type", "yarn");
  Parsed yarn = parse(w);
  auto unsupported = model_config_from_gguf(*yarn.file);
  EXPECT_EQ(unsupported.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(unsupported.status().message().find("yarn"), std::string::npos);

  GgufWriter legacy = m.writer();
  legacy.set_f32("llama.rope.scale_linear", 2.0f);
  Parsed q = parse(legacy);
  auto linear = model_config_from_gguf(*q.file);
  ASSERT_TRUE(linear.is_ok()) << linear.status().to_string();
  EXPECT_EQ(linear->rope_scaling.type, RopeScalingType::kLinear);
  EXPECT_FLOAT_EQ(linear->rope_scaling.factor, 2.0f);
}

// Each malformed file fails with a message naming what is wrong.
struct BadCase {
  const char* name;
  void (*mutate)(TinyModel&, GgufWriter&);
  StatusCode code;
  const char* message_part;
};

const BadCase kBadCases[] = {
    {"missing_key",
     [](TinyModel&, GgufWriter& w) {
       // Only the architecture and the width: the next required key is reported.
       w = GgufWriter();
       w.set_string("general.architecture", "llama");
       w.set_u32("llama.embedding_length", 32);
       TinyModel::add(w, "token_embd.weight", TensorType::F32, 64, 32);
     },
     StatusCode::kNotFound, "llama.block_count"},
    {"unknown_arch",
     [](TinyModel&, GgufWriter& w) { w.set_string("general.architecture", "mamba"); },
     StatusCode::kUnsupported, "mamba"},
    {"heads_not_divisible",
     [](TinyModel&, GgufWriter& w) { w.set_u32("llama.attention.head_count_kv", 3); },
     StatusCode::kInvalidArgument, "not divisible by n_head_kv"},
    {"head_dim_mismatch",
     [](TinyModel&, GgufWriter& w) {
       w.set_u32("llama.attention.key_length", 8);
       w.set_u32("llama.attention.value_length", 16);
     },
     StatusCode::kUnsupported, "head_dim mismatch"},
    {"embd_not_divisible",
     [](TinyModel&, GgufWriter& w) { w.set_u32("llama.attention.head_count", 5); },
     StatusCode::kInvalidArgument, "not divisible by n_head"},
    {"vocab_size_disagrees", [](TinyModel&, GgufWriter& w) { w.set_u32("llama.vocab_size", 65); },
     StatusCode::kInvalidArgument, "vocab_size"},
    {"embedding_width_wrong",
     [](TinyModel&, GgufWriter& w) { w.set_u32("llama.embedding_length", 40); },
     StatusCode::kInvalidArgument, "token_embd.weight"},
    {"rope_dim_too_big",
     [](TinyModel&, GgufWriter& w) { w.set_u32("llama.rope.dimension_count", 16); },
     StatusCode::kInvalidArgument, "rope dimension count"},
    {"eps_missing",
     [](TinyModel&, GgufWriter& w) {
       GgufWriter fresh;
       fresh.set_string("general.architecture", "llama");
       fresh.set_u32("llama.context_length", 256);
       fresh.set_u32("llama.embedding_length", 32);
       fresh.set_u32("llama.block_count", 1);
       fresh.set_u32("llama.feed_forward_length", 48);
       fresh.set_u32("llama.attention.head_count", 4);
       TinyModel::add(fresh, "token_embd.weight", TensorType::F32, 64, 32);
       w = std::move(fresh);
     },
     StatusCode::kNotFound, "layer_norm_rms_epsilon"},
};

class BadConfigTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadConfigTest, FailsWithActionableError) {
  TinyModel m;
  GgufWriter w = m.writer();
  GetParam().mutate(m, w);
  Parsed p = parse(w);
  ASSERT_NE(p.file, nullptr);
  auto config = model_config_from_gguf(*p.file);
  ASSERT_FALSE(config.is_ok());
  EXPECT_EQ(config.status().code(), GetParam().code) << config.status().to_string();
  EXPECT_NE(config.status().message().find(GetParam().message_part), std::string::npos)
      << config.status().to_string();
}

INSTANTIATE_TEST_SUITE_P(Cases, BadConfigTest, ::testing::ValuesIn(kBadCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ModelWeights, ShapeMismatchNamesTheTensor) {
  TinyModel m;
  m.n_layer = 1;
  GgufWriter w = m.writer();
  // Replace layer 0's K projection with one of the wrong height (a full n_embd rows).
  Parsed good = parse(w);
  GgufWriter bad;
  for (const auto& [key, value] : good.file->metadata()) bad.set(key, value);
  for (const GgufTensorInfo& t : good.file->tensors()) {
    std::vector<uint64_t> dims = t.dims;
    if (t.name == "blk.0.attn_k.weight") dims[1] = 32;
    const size_t bytes = row_bytes(t.type, dims[0]) * (dims.size() > 1 ? dims[1] : 1);
    ASSERT_TRUE(bad.add_tensor(t.name, t.type, dims, std::vector<uint8_t>(bytes, 0)).is_ok());
  }
  Parsed p = parse(bad);
  auto config = model_config_from_gguf(*p.file);
  ASSERT_TRUE(config.is_ok()) << config.status().to_string();
  auto weights = map_weights(*p.file, *config);
  ASSERT_FALSE(weights.is_ok());
  EXPECT_NE(weights.status().message().find("blk.0.attn_k.weight"), std::string::npos)
      << weights.status().to_string();
  EXPECT_NE(weights.status().message().find("[32, 32]"), std::string::npos)
      << weights.status().to_string();
}

TEST(ModelWeights, MissingTensorAndExtraLayerAreErrors) {
  TinyModel m;
  m.n_layer = 2;
  GgufWriter w = m.writer();
  w.set_u32("llama.block_count", 3);
  Parsed p = parse(w);
  auto config = model_config_from_gguf(*p.file);
  ASSERT_TRUE(config.is_ok());
  auto weights = map_weights(*p.file, *config);
  EXPECT_EQ(weights.status().code(), StatusCode::kNotFound);
  EXPECT_NE(weights.status().message().find("blk.2.attn_norm.weight"), std::string::npos);

  w.set_u32("llama.block_count", 1);
  Parsed q = parse(w);
  auto config1 = model_config_from_gguf(*q.file);
  ASSERT_TRUE(config1.is_ok());
  EXPECT_NE(map_weights(*q.file, *config1).status().message().find("blk.1"), std::string::npos);
}

TEST(ModelWeights, UnsupportedWeightTypeIsRejected) {
  TinyModel m;
  m.matrix_type = TensorType::Q5_0;
  m.n_ff = 64;  // whole blocks of 32
  GgufWriter w = m.writer();
  Parsed p = parse(w);
  auto config = model_config_from_gguf(*p.file);
  ASSERT_TRUE(config.is_ok()) << config.status().to_string();
  auto weights = map_weights(*p.file, *config);
  EXPECT_EQ(weights.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(weights.status().message().find("Q5_0"), std::string::npos);
}

TEST(LoadModel, LoadsTheDefaultModelWhenPresent) {
  const std::filesystem::path path =
      std::filesystem::path(LLAMASERVE_SOURCE_DIR) / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path))
    GTEST_SKIP() << path << " is missing (scripts/fetch_model.sh)";
  auto model = load_model(path.string());
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  const ModelConfig& c = (*model)->config;
  EXPECT_EQ(c.n_layer, 30);
  EXPECT_EQ(c.n_embd, 576);
  EXPECT_EQ(c.n_head, 9);
  EXPECT_EQ(c.n_head_kv, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.n_ff, 1536);
  EXPECT_EQ(c.n_vocab, 49152);
  EXPECT_FLOAT_EQ(c.rope_theta, 100000.0f);
  EXPECT_TRUE(c.tied_output);
  EXPECT_EQ((*model)->weights.token_embd.type, TensorType::Q8_0);
  EXPECT_EQ((*model)->weights.layers[0].wq.type, TensorType::Q4_1);
}

TEST(LoadModel, MissingFileIsAnIoError) {
  auto model = load_model("/nonexistent/model.gguf");
  ASSERT_FALSE(model.is_ok());
  EXPECT_NE(model.status().message().find("/nonexistent/model.gguf"), std::string::npos);
}

}  // namespace
}  // namespace llamaserve
