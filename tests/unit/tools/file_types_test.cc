// The per-tensor type mix of each file type, including the block-size fallbacks.
#include <gtest/gtest.h>

#include "model/importers/file_types.h"
#include "model/importers/llama_tensors.h"
#include "model/shapes.h"

namespace llamaserve {
namespace {

TensorType type_of(const FileType& ft, const std::string& name, std::vector<uint64_t> dims,
                   int64_t n_layer = 32, bool tied = false) {
  return choose_tensor_type(ft, name, dims, n_layer, tied).type;
}

FileType file_type(const char* name) {
  auto ft = parse_file_type(name);
  EXPECT_TRUE(ft.is_ok()) << ft.status().to_string();
  return *ft;
}

TEST(FileTypesTest, ParsesNamesCaseInsensitively) {
  EXPECT_EQ(file_type("Q4_K_M").id, 15);
  EXPECT_EQ(file_type("q8_0").base, TensorType::Q8_0);
  EXPECT_EQ(file_type("bf16").id, 32);
  auto bad = parse_file_type("q3_k_s");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("q4_k_m"), std::string::npos);  // lists the known ones
}

TEST(FileTypesTest, VectorsStayF32AndPlainTypesApplyEverywhere) {
  for (const char* name : {"f16", "q8_0", "q4_k_m", "q6_k"}) {
    EXPECT_EQ(type_of(file_type(name), "blk.0.attn_norm.weight", {4096}), TensorType::F32);
    EXPECT_EQ(type_of(file_type(name), "rope_freqs.weight", {64}), TensorType::F32);
  }
  const FileType q8 = file_type("q8_0");
  EXPECT_EQ(type_of(q8, "output.weight", {4096, 32000}), TensorType::Q8_0);
  EXPECT_EQ(type_of(q8, "token_embd.weight", {4096, 32000}), TensorType::Q8_0);
  EXPECT_EQ(type_of(file_type("q6_k"), "blk.3.ffn_up.weight", {4096, 11008}), TensorType::Q6_K);
  EXPECT_EQ(type_of(file_type("f16"), "blk.3.ffn_up.weight", {4099, 11008}), TensorType::F16);
}

TEST(FileTypesTest, LegacyFourBitTypesGiveTheHeadSixBits) {
  const FileType q4_0 = file_type("q4_0");
  EXPECT_EQ(type_of(q4_0, "blk.0.attn_q.weight", {4096, 4096}), TensorType::Q4_0);
  EXPECT_EQ(type_of(q4_0, "output.weight", {4096, 32000}), TensorType::Q6_K);
  EXPECT_EQ(type_of(q4_0, "token_embd.weight", {4096, 32000}), TensorType::Q4_0);
  EXPECT_EQ(type_of(q4_0, "token_embd.weight", {4096, 32000}, 32, /*tied=*/true), TensorType::Q6_K);
}

TEST(FileTypesTest, KMediumMixOnLlama7B) {
  const FileType q4km = file_type("q4_k_m");
  EXPECT_EQ(type_of(q4km, "token_embd.weight", {4096, 32000}), TensorType::Q6_K);
  EXPECT_EQ(type_of(q4km, "output.weight", {4096, 32000}), TensorType::Q6_K);
  EXPECT_EQ(type_of(q4km, "blk.5.attn_q.weight", {4096, 4096}), TensorType::Q4_K);
  // 32 layers: the first 4, the last 4, and every third from layer 6 get Q6_K.
  std::vector<int64_t> six_bit;
  for (int64_t l = 0; l < 32; ++l) {
    const TensorType v = type_of(q4km, fmt::format("blk.{}.attn_v.weight", l), {4096, 4096});
    const TensorType down = type_of(q4km, fmt::format("blk.{}.ffn_down.weight", l), {11008, 4096});
    EXPECT_EQ(v, down) << l;
    if (v == TensorType::Q6_K)
      six_bit.push_back(l);
    else
      EXPECT_EQ(v, TensorType::Q4_K);
  }
  EXPECT_EQ(six_bit,
            (std::vector<int64_t>{0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31}));
  const FileType q5km = file_type("q5_k_m");
  EXPECT_EQ(type_of(q5km, "blk.5.ffn_gate.weight", {4096, 11008}), TensorType::Q5_K);
  EXPECT_EQ(type_of(q5km, "blk.0.ffn_down.weight", {11008, 4096}), TensorType::Q6_K);
}

TEST(FileTypesTest, RowsThatAreNotWholeSuperBlocksFallBack) {
  // SmolLM2: n_embd 576 = 2.25 x 256, n_ff 1536 = 6 x 256.
  const FileType q4km = file_type("q4_k_m");
  const auto q =
      choose_tensor_type(q4km, "blk.4.attn_q.weight", std::vector<uint64_t>{576, 576}, 30, true);
  EXPECT_EQ(q.type, TensorType::Q4_1);
  EXPECT_NE(q.fallback_note.find("Q4_K -> Q4_1"), std::string::npos);
  EXPECT_NE(q.fallback_note.find("576"), std::string::npos);
  EXPECT_EQ(type_of(q4km, "blk.4.ffn_down.weight", {1536, 576}, 30, true), TensorType::Q4_K);
  EXPECT_EQ(type_of(q4km, "token_embd.weight", {576, 49152}, 30, true), TensorType::Q8_0);
  EXPECT_EQ(type_of(file_type("q5_k_m"), "blk.4.attn_q.weight", {576, 576}, 30), TensorType::Q8_0);
  // Not even a multiple of 32: F16.
  const auto odd =
      choose_tensor_type(q4km, "blk.1.attn_q.weight", std::vector<uint64_t>{100, 100}, 4, false);
  EXPECT_EQ(odd.type, TensorType::F16);
  EXPECT_NE(odd.fallback_note.find("Q4_K -> Q4_1, Q4_1 -> F16"), std::string::npos);
  EXPECT_EQ(type_of(file_type("q8_0"), "blk.1.attn_q.weight", {100, 100}), TensorType::F16);
}

TEST(FileTypesTest, NotesGroupOverLayers) {
  const auto lines = group_tensor_notes({{"blk.0.attn_q.weight", "X"},
                                         {"blk.1.attn_q.weight", "X"},
                                         {"blk.1.attn_k.weight", "Y"},
                                         {"token_embd.weight", "Z"}});
  EXPECT_EQ(lines, (std::vector<std::string>{"blk.*.attn_q.weight: X [2 tensors]",
                                             "blk.*.attn_k.weight: Y", "token_embd.weight: Z"}));
}

TEST(FileTypesTest, TensorBytesOfAShape) {
  auto shape = find_model_shape("llama2-7b");
  ASSERT_TRUE(shape.is_ok());
  const ModelConfig c = config_from_shape(**shape);
  uint64_t f16_total = 0;
  for (const auto& t : llama_tensor_bytes(c, file_type("f16"))) f16_total += t.n_bytes;
  // 6,738,415,616 parameters; norms (65 x 4096) are F32 and the rest F16.
  const uint64_t params = 6738415616ull;
  const uint64_t norm_params = 65ull * 4096;
  EXPECT_EQ(f16_total, (params - norm_params) * 2 + norm_params * 4);
  uint64_t q8_total = 0;
  for (const auto& t : llama_tensor_bytes(c, file_type("q8_0"))) q8_total += t.n_bytes;
  EXPECT_EQ(q8_total, (params - norm_params) / 32 * 34 + norm_params * 4);
}

}  // namespace
}  // namespace llamaserve
