// The model shapes the tools know by name (plan --shape, synth --shape): exact LLaMA
// hyper-parameters, kept in this one table so that planning and synthetic models agree.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"
#include "model/config.h"

namespace llamaserve {

struct ModelShape {
  std::string_view name;
  std::string_view description;
  int64_t n_vocab;
  int64_t n_embd;
  int64_t n_layer;
  int64_t n_head;
  int64_t n_head_kv;
  int64_t n_ff;
  int64_t n_ctx_train;
  float rope_theta;
  float norm_eps;
  // Vocabulary-only GGUF (tests/fixtures, installed in share/llamaserve) whose tokenizer
  // matches n_vocab.
  std::string_view vocab_file;
};

std::span<const ModelShape> model_shapes();

// The shape called `name`, or an error that lists the known names.
Result<const ModelShape*> find_model_shape(std::string_view name);

// "llama2-7b, llama2-13b, ..." for help texts and errors.
std::string model_shape_names();

// The ModelConfig of a shape (llama arch, untied output, full-width RoPE); validated.
ModelConfig config_from_shape(const ModelShape& shape);

}  // namespace llamaserve
