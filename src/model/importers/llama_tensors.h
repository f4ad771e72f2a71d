// The tensors of a GGUF llama model and the two layout facts importers must get right: the
// row order GGUF expects for Q and K, and the RoPE factors of LLaMA 3.1-style scaling.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace llamaserve {

// Which projection a per-layer matrix is, for importers that map foreign names onto these.
enum class LlamaTensorKind {
  kTokenEmbd,
  kAttnNorm,
  kAttnQ,
  kAttnK,
  kAttnV,
  kAttnOutput,
  kFfnNorm,
  kFfnGate,
  kFfnUp,
  kFfnDown,
  kOutputNorm,
  kOutput,
};

struct LlamaTensorSpec {
  std::string name;  // GGUF name: "blk.3.attn_q.weight"
  LlamaTensorKind kind;
  int64_t layer = -1;          // -1 outside the layers
  std::vector<uint64_t> dims;  // GGUF order: {cols, rows} for matrices, {n} for vectors
};

// Every tensor of `config` in file order: token_embd, then per layer attn_norm, attn_q,
// attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down, then output_norm and,
// unless config.tied_output, output.
std::vector<LlamaTensorSpec> llama_tensor_specs(const ModelConfig& config);

// GGUF's llama layout rotates the pairs (2i, 2i+1) of each head (ggml's "normal" RoPE). Hugging
// Face checkpoints instead rotate (i, i + d/2) (rotate_half): their q_proj / k_proj rows of a
// head hold all first halves of the pairs, then all second halves. Both give pair i the
// frequency theta^(-2i/d). So the GGUF row 2i + j of a head of d rows is HF row j * d/2 + i
// (j = 0, 1), and the returned map gives, for each GGUF row, the HF row it comes from.
// Applying it to the HF weights makes the GGUF model compute the same attention scores:
// q·k is a sum over pairs, and the map moves both members of every pair together.
std::vector<int64_t> hf_to_gguf_rope_rows(int64_t n_heads, int64_t head_dim);

// LLaMA 3.1 scaling as per-pair divisors of the inverse frequencies (the rope_freqs tensor,
// rope_dim / 2 values): 1 for short wavelengths, `factor` for long ones, and in between
// 1 / ((1 - s) / factor + s) with s = (original_context / wavelength - low) / (high - low),
// which is exactly the blend transformers applies to inv_freq.
std::vector<float> llama3_rope_factors(const ModelConfig& config);

}  // namespace llamaserve
