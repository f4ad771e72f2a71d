#include "model/shapes.h"

#include <array>

namespace llamaserve {
namespace {

constexpr std::string_view kLlama2Vocab = "vocab-llama2-spm.gguf";
constexpr std::string_view kLlama3Vocab = "vocab-llama3-bpe.gguf";

// Dimensions as published in the models' config.json files.
constexpr std::array kShapes = {
    ModelShape{"llama2-7b", "LLaMA 2 7B", 32000, 4096, 32, 32, 32, 11008, 4096, 10000.0f, 1e-5f,
               kLlama2Vocab},
    ModelShape{"llama2-13b", "LLaMA 2 13B", 32000, 5120, 40, 40, 40, 13824, 4096, 10000.0f, 1e-5f,
               kLlama2Vocab},
    ModelShape{"llama2-70b", "LLaMA 2 70B (grouped-query attention, 8 KV heads)", 32000, 8192, 80,
               64, 8, 28672, 4096, 10000.0f, 1e-5f, kLlama2Vocab},
    ModelShape{"llama3-8b", "LLaMA 3 8B (grouped-query attention, 8 KV heads)", 128256, 4096, 32,
               32, 8, 14336, 8192, 500000.0f, 1e-5f, kLlama3Vocab},
    // Small enough for tests, with the LLaMA 2 vocabulary, grouped-query attention, and rows
    // that are whole 256-element blocks so that every quantized type applies.
    ModelShape{"tiny", "4 layers, n_embd 256, 4 heads, 2 KV heads (tests)", 32000, 256, 4, 4, 2,
               768, 2048, 10000.0f, 1e-5f, kLlama2Vocab},
};

}  // namespace

std::span<const ModelShape> model_shapes() { return kShapes; }

std::string model_shape_names() {
  std::string names;
  for (const ModelShape& shape : kShapes) {
    names += names.empty() ? "" : ", ";
    names += shape.name;
  }
  return names;
}

Result<const ModelShape*> find_model_shape(std::string_view name) {
  for (const ModelShape& shape : kShapes) {
    if (shape.name == name) return &shape;
  }
  return make_error(StatusCode::kNotFound, "unknown model shape '{}'; known shapes: {}", name,
                    model_shape_names());
}

ModelConfig config_from_shape(const ModelShape& shape) {
  ModelConfig c;
  c.arch = "llama";
  c.n_vocab = shape.n_vocab;
  c.n_embd = shape.n_embd;
  c.n_layer = shape.n_layer;
  c.n_head = shape.n_head;
  c.n_head_kv = shape.n_head_kv;
  c.head_dim = shape.n_embd / shape.n_head;
  c.n_ff = shape.n_ff;
  c.n_ctx_train = shape.n_ctx_train;
  c.rope_theta = shape.rope_theta;
  c.rope_dim = c.head_dim;
  c.norm_eps = shape.norm_eps;
  return c;
}

}  // namespace llamaserve
