// ModelConfig: the hyperparameters of a LLaMA-family decoder, read once from GGUF metadata
// and validated so that every later stage can trust them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"
#include "quant/types.h"

namespace llamaserve {

class GgufFile;

// How the two halves of a rotated pair are laid out inside a head.
//   kNormal: pairs (2i, 2i+1). ggml's llama arch; GGUF llama files permute Q/K rows for it.
//   kNeox:   pairs (i, i + rope_dim/2). qwen2 and the Hugging Face layout.
enum class RopeOrdering { kNormal, kNeox };

enum class RopeScalingType { kNone, kLinear, kLlama3 };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  float factor = 1.0f;  // linear: positions are divided by it; llama3: low frequencies are
  // llama3 only: wavelengths above original_context_length / low_freq_factor are divided by
  // `factor`, those below original_context_length / high_freq_factor are kept, and the band
  // in between is interpolated.
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int64_t original_context_length = 8192;
};

// The largest vocabulary a model file may declare; larger counts are taken as corrupt.
inline constexpr int64_t kMaxVocabSize = int64_t{1} << 22;

struct ModelConfig {
  std::string arch;  // "llama" or "qwen2"
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;  // usually n_embd / n_head; GGUF attention.key_length overrides
  int64_t n_ff = 0;
  int64_t n_ctx_train = 0;
  float rope_theta = 10000.0f;
  int64_t rope_dim = 0;  // leading dimensions of each head that are rotated (<= head_dim)
  RopeOrdering rope_ordering = RopeOrdering::kNormal;
  RopeScaling rope_scaling;
  float norm_eps = 1e-5f;
  bool tied_output = false;  // no output.weight: the head reuses token_embd
  bool attn_bias = false;    // q/k/v projections carry biases (qwen2)

  // Tokens per sequence when nobody chose: the training context, at most 8192 (4096 when the
  // file does not say). The one rule every entry point and executor uses.
  int64_t default_context_tokens() const;

  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_head_kv * head_dim; }
  int64_t group_size() const { return n_head / n_head_kv; }  // query heads per KV head
};

// Reads the config of a `llama` (LLaMA 2/3, Mistral, SmolLM2) or `qwen2` GGUF file and
// checks it against itself and against token_embd / output shapes. Errors name the key or
// tensor and what was expected.
Result<ModelConfig> model_config_from_gguf(const GgufFile& file);

// Checks the relations every consumer relies on (divisibility, positivity, rope dims).
Status validate_config(const ModelConfig& config);

// K and V of one token over all layers, stored as `kv_type` (F32 or F16; a block type
// needs kv_dim to be a multiple of its block).
uint64_t kv_bytes_per_token(const ModelConfig& config, TensorType kv_type);

// A KV cache element type as settings name it: "f16" or "q8_0" (either case).
Result<TensorType> parse_kv_cache_type(std::string_view name);

const char* rope_ordering_name(RopeOrdering ordering);
const char* rope_scaling_name(RopeScalingType type);

}  // namespace llamaserve
