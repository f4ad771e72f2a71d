// The two layout facts importers rely on, checked against independent formulations: the
// Q/K row permutation against rotate_half RoPE (Hugging Face) vs pairwise RoPE (GGUF), and
// the LLaMA 3 rope_freqs factors against the engine's own metadata-driven scaling.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/rope.h"
#include "model/importers/llama_tensors.h"
#include "tools_test_util.h"

namespace llamaserve {
namespace {

// Hugging Face: out = x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1] over halves;
// element i and i + d/2 share frequency i.
std::vector<float> rope_hf(const std::vector<float>& x, int64_t d, float pos, float theta) {
  std::vector<float> out(x.size());
  const int64_t half = d / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double angle = pos * std::pow(theta, -2.0 * i / d);
    const double c = std::cos(angle), s = std::sin(angle);
    out[i] = static_cast<float>(x[i] * c - x[i + half] * s);
    out[i + half] = static_cast<float>(x[i + half] * c + x[i] * s);
  }
  return out;
}

// GGUF llama (ggml normal mode): pairs (2i, 2i+1) share frequency i.
std::vector<float> rope_gguf(const std::vector<float>& x, int64_t d, float pos, float theta) {
  std::vector<float> out(x.size());
  for (int64_t i = 0; i < d / 2; ++i) {
    const double angle = pos * std::pow(theta, -2.0 * i / d);
    const double c = std::cos(angle), s = std::sin(angle);
    out[2 * i] = static_cast<float>(x[2 * i] * c - x[2 * i + 1] * s);
    out[2 * i + 1] = static_cast<float>(x[2 * i] * s + x[2 * i + 1] * c);
  }
  return out;
}

TEST(LlamaTensorsTest, RopeRowMapTurnsRotateHalfIntoPairwiseRope) {
  constexpr int64_t kHeads = 3, kDim = 16, kCols = 5;
  const std::vector<int64_t> map = hf_to_gguf_rope_rows(kHeads, kDim);
  ASSERT_EQ(map.size(), static_cast<size_t>(kHeads * kDim));
  // A permutation that keeps every row inside its head.
  std::vector<int> seen(map.size(), 0);
  for (size_t r = 0; r < map.size(); ++r) {
    ASSERT_EQ(map[r] / kDim, static_cast<int64_t>(r) / kDim);
    ++seen[map[r]];
  }
  for (int count : seen) EXPECT_EQ(count, 1);

  // A projection W (HF rows) of an input x; then RoPE. The GGUF model computes with the
  // permuted W and pairwise RoPE; its rotated head must be the HF rotated head, permuted.
  const std::vector<float> w = tools_test::random_floats(kHeads * kDim * kCols, 7);
  const std::vector<float> x = tools_test::random_floats(kCols, 8);
  for (float pos : {0.0f, 1.0f, 17.0f, 1000.0f}) {
    for (int64_t h = 0; h < kHeads; ++h) {
      std::vector<float> q_hf(kDim), q_gguf(kDim);
      for (int64_t r = 0; r < kDim; ++r) {
        for (int64_t c = 0; c < kCols; ++c) {
          q_hf[r] += w[(h * kDim + r) * kCols + c] * x[c];
          q_gguf[r] += w[map[h * kDim + r] * kCols + c] * x[c];
        }
      }
      const std::vector<float> rot_hf = rope_hf(q_hf, kDim, pos, 10000.0f);
      const std::vector<float> rot_gguf = rope_gguf(q_gguf, kDim, pos, 10000.0f);
      for (int64_t r = 0; r < kDim; ++r) {
        EXPECT_NEAR(rot_gguf[r], rot_hf[map[h * kDim + r] - h * kDim], 1e-5f);
      }
    }
  }
  // The first rows of a head of 8: GGUF rows 0..3 come from HF rows 0, 4, 1, 5.
  const std::vector<int64_t> small = hf_to_gguf_rope_rows(1, 8);
  EXPECT_EQ(small, (std::vector<int64_t>{0, 4, 1, 5, 2, 6, 3, 7}));
}

TEST(LlamaTensorsTest, Llama3FactorsReproduceTheMetadataScaling) {
  ModelConfig c;
  c.head_dim = 128;
  c.rope_dim = 128;
  c.rope_theta = 500000.0f;
  c.rope_scaling = {RopeScalingType::kLlama3, 8.0f, 1.0f, 4.0f, 8192};
  const std::vector<float> factors = llama3_rope_factors(c);
  ASSERT_EQ(factors.size(), 64u);
  EXPECT_EQ(factors.front(), 1.0f);  // the highest frequency is kept
  EXPECT_EQ(factors.back(), 8.0f);   // the lowest is divided by the factor
  bool has_blend = false;
  for (float f : factors) has_blend |= f > 1.0f && f < 8.0f;
  EXPECT_TRUE(has_blend);

  const std::vector<float> by_metadata = cpu::rope_inv_freq(c, nullptr);
  ModelConfig plain = c;
  plain.rope_scaling = {};
  const std::vector<float> by_factors = cpu::rope_inv_freq(plain, factors.data());
  for (size_t i = 0; i < factors.size(); ++i) {
    EXPECT_NEAR(by_factors[i], by_metadata[i], 2e-6f * by_metadata[i]) << i;
  }
}

TEST(LlamaTensorsTest, TensorListFollowsTheConfig) {
  ModelConfig c;
  c.n_vocab = 100;
  c.n_embd = 64;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_head_kv = 2;
  c.head_dim = 16;
  c.n_ff = 96;
  auto specs = llama_tensor_specs(c);
  ASSERT_EQ(specs.size(), 1u + 2 * 9 + 2);
  EXPECT_EQ(specs[0].name, "token_embd.weight");
  EXPECT_EQ(specs[0].dims, (std::vector<uint64_t>{64, 100}));
  EXPECT_EQ(specs[3].name, "blk.0.attn_k.weight");
  EXPECT_EQ(specs[3].dims, (std::vector<uint64_t>{64, 32}));
  EXPECT_EQ(specs[9].name, "blk.0.ffn_down.weight");
  EXPECT_EQ(specs[9].dims, (std::vector<uint64_t>{96, 64}));
  EXPECT_EQ(specs.back().name, "output.weight");
  c.tied_output = true;
  specs = llama_tensor_specs(c);
  EXPECT_EQ(specs.back().name, "output_norm.weight");
}

}  // namespace
}  // namespace llamaserve
