#include "model/importers/llama_tensors.h"

#include <cmath>

#include <fmt/format.h>

namespace llamaserve {

std::vector<LlamaTensorSpec> llama_tensor_specs(const ModelConfig& c) {
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  std::vector<LlamaTensorSpec> specs;
  specs.push_back(
      {"token_embd.weight", LlamaTensorKind::kTokenEmbd, -1, {u(c.n_embd), u(c.n_vocab)}});
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const auto name = [l](const char* what) { return fmt::format("blk.{}.{}.weight", l, what); };
    specs.push_back({name("attn_norm"), LlamaTensorKind::kAttnNorm, l, {u(c.n_embd)}});
    specs.push_back({name("attn_q"), LlamaTensorKind::kAttnQ, l, {u(c.n_embd), u(c.q_dim())}});
    specs.push_back({name("attn_k"), LlamaTensorKind::kAttnK, l, {u(c.n_embd), u(c.kv_dim())}});
    specs.push_back({name("attn_v"), LlamaTensorKind::kAttnV, l, {u(c.n_embd), u(c.kv_dim())}});
    specs.push_back(
        {name("attn_output"), LlamaTensorKind::kAttnOutput, l, {u(c.q_dim()), u(c.n_embd)}});
    specs.push_back({name("ffn_norm"), LlamaTensorKind::kFfnNorm, l, {u(c.n_embd)}});
    specs.push_back({name("ffn_gate"), LlamaTensorKind::kFfnGate, l, {u(c.n_embd), u(c.n_ff)}});
    specs.push_back({name("ffn_up"), LlamaTensorKind::kFfnUp, l, {u(c.n_embd), u(c.n_ff)}});
    specs.push_back({name("ffn_down"), LlamaTensorKind::kFfnDown, l, {u(c.n_ff), u(c.n_embd)}});
  }
  specs.push_back({"output_norm.weight", LlamaTensorKind::kOutputNorm, -1, {u(c.n_embd)}});
  if (!c.tied_output) {
    specs.push_back({"output.weight", LlamaTensorKind::kOutput, -1, {u(c.n_embd), u(c.n_vocab)}});
  }
  return specs;
}

std::vector<int64_t> hf_to_gguf_rope_rows(int64_t n_heads, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  std::vector<int64_t> map(static_cast<size_t>(n_heads * head_dim));
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        map[h * head_dim + 2 * i + j] = h * head_dim + j * half + i;
      }
    }
  }
  return map;
}

std::vector<float> llama3_rope_factors(const ModelConfig& c) {
  const RopeScaling& s = c.rope_scaling;
  const int64_t n_pairs = c.rope_dim / 2;
  std::vector<float> factors(static_cast<size_t>(n_pairs), 1.0f);
  const double old_ctx = static_cast<double>(s.original_context_length);
  const double low_freq_wavelen = old_ctx / s.low_freq_factor;
  const double high_freq_wavelen = old_ctx / s.high_freq_factor;
  for (int64_t i = 0; i < n_pairs; ++i) {
    const double inv_freq =
        1.0 / std::pow(static_cast<double>(c.rope_theta), static_cast<double>(2 * i) / c.rope_dim);
    const double wavelen = 2.0 * M_PI / inv_freq;
    if (wavelen < high_freq_wavelen) continue;
    if (wavelen > low_freq_wavelen) {
      factors[i] = s.factor;
      continue;
    }
    const double smooth =
        (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
    factors[i] = static_cast<float>(1.0 / ((1.0 - smooth) / s.factor + smooth));
  }
  return factors;
}

}  // namespace llamaserve
