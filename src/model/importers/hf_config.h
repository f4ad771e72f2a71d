// config.json of a Hugging Face LLaMA-family checkpoint (LlamaForCausalLM,
// MistralForCausalLM), read into a ModelConfig. Both the classic keys (rope_theta,
// rope_scaling) and the rope_parameters object of newer transformers releases are accepted.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "model/config.h"

namespace llamaserve {

struct HfModelConfig {
  std::string architecture;  // "LlamaForCausalLM" / "MistralForCausalLM"
  ModelConfig config;        // arch "llama"; tied_output from tie_word_embeddings
  std::optional<int64_t> bos_token_id;
  std::optional<int64_t> eos_token_id;  // the first one when config.json lists several
  // Mistral: attention window; the engine attends to the whole context, which equals the
  // model for prompts shorter than the window.
  std::optional<int64_t> sliding_window;
};

// Parses the text of config.json. Errors name the key and what was expected; unsupported
// architectures, activations, biases and RoPE scaling kinds are refused.
Result<HfModelConfig> parse_hf_config(std::string_view json_text);

// Reads DIR/config.json.
Result<HfModelConfig> read_hf_config(const std::string& dir);

}  // namespace llamaserve
