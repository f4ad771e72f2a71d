// Model file types (general.file_type) and the per-tensor type mix each one uses.
//
// The mix, for a tensor with row length n (GGUF dims[0]):
//   - 1-D tensors (norms, rope_freqs) stay F32 in every file type;
//   - f32 / f16 / bf16 / q8_0 / q6_k: every matrix gets that type;
//   - q4_0 / q4_1: matrices get that type, the output head (output.weight, or token_embd
//     when the embeddings are tied) gets Q6_K;
//   - q4_k_m / q5_k_m: matrices get Q4_K / Q5_K; token_embd and output get Q6_K; attn_v and
//     ffn_down get Q6_K in the layers where more bits pay off most: the first and last eighth
//     of the layers and every third layer in between (use_more_bits below, as in the common
//     K-quant "medium" mix).
// When n is not a multiple of the chosen type's block, a type with 32-element blocks takes
// its place: Q4_K → Q4_1, Q5_K → Q8_0, Q6_K → Q8_0 (the engine computes with no 5-bit
// 32-block type); a 32-block type whose block does not divide n falls back to F16.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "model/config.h"
#include "model/plan.h"
#include "quant/types.h"

namespace llamaserve {

struct FileType {
  std::string_view name;  // "q4_k_m"
  int32_t id;             // general.file_type (llama.cpp's numbering)
  TensorType base;        // the type of most matrices
  bool k_mix;             // *_K_M: Q6_K for embeddings, head and some attn_v / ffn_down
  bool q6_head;           // the output head gets Q6_K
};

// Case-insensitive: f32 f16 bf16 q8_0 q4_0 q4_1 q4_k_m q5_k_m q6_k.
Result<FileType> parse_file_type(std::string_view name);
std::string file_type_names();

// The middle-layer subset of the K-quant medium mixes.
bool use_more_bits(int64_t layer, int64_t n_layer);

struct TensorTypeChoice {
  TensorType type = TensorType::F32;
  // Non-empty when a block-size fallback replaced the mix's type ("Q4_K -> Q4_1: row length
  // 576 is not a multiple of 256").
  std::string fallback_note;
};

// The type of tensor `name` (GGUF name, dims in GGUF order) in a file of `file_type`.
// `tied_output`: the model has no output.weight, so token_embd is also the head.
TensorTypeChoice choose_tensor_type(const FileType& file_type, std::string_view name,
                                    std::span<const uint64_t> dims, int64_t n_layer,
                                    bool tied_output);

// "blk.*.attn_q.weight: Q4_K -> Q4_1 (...) [30 tensors]": per-tensor notes grouped over
// layers, in first-seen order, so that a 80-layer model's fallbacks read as one line each.
std::vector<std::string> group_tensor_notes(
    const std::vector<std::pair<std::string, std::string>>& name_and_note);

// Bytes, row length and type of every tensor of a llama model of `config` written as
// `file_type` (the weights a shape would have, without writing it).
std::vector<NamedTensorBytes> llama_tensor_bytes(const ModelConfig& config,
                                                 const FileType& file_type);

}  // namespace llamaserve
