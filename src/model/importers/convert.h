// Importers that write llama GGUF files from other checkpoint formats:
//   Hugging Face directories (config.json, *.safetensors, tokenizer) of LlamaForCausalLM /
//   MistralForCausalLM models (LLaMA 2, LLaMA 3, Mistral, SmolLM2), and llama2.c checkpoints
//   (model.bin + tokenizer.bin).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/progress.h"
#include "core/status.h"
#include "model/config.h"

namespace llamaserve {

struct ConvertOptions {
  std::string output_path;
  std::string type = "f16";  // a file type (file_types.h): f32 f16 bf16 q8_0, or a quantized mix
  std::string name;          // general.name; default: the input's file or directory name
  int threads = 0;           // 0: all cores
  ProgressStyle progress = ProgressStyle::kAuto;
};

struct ConvertSummary {
  ModelConfig config;
  std::string tokenizer_model;  // "llama" or "gpt2"
  std::string tokenizer_pre;
  size_t n_tensors = 0;
  uint64_t n_bytes = 0;  // tensor data written
  // Things the user should know: type fallbacks, ignored checkpoint features.
  std::vector<std::string> notes;
};

// Converts a Hugging Face model directory. Every input is validated before anything is
// written; on any error no file exists at options.output_path.
Result<ConvertSummary> convert_hf_model(const std::string& dir, const ConvertOptions& options);

// Converts a llama2.c checkpoint (legacy version-0 format: 7 int32 header fields, float32
// weights) and its tokenizer.bin.
Result<ConvertSummary> convert_llama2c_model(const std::string& model_path,
                                             const std::string& tokenizer_path,
                                             const ConvertOptions& options);

}  // namespace llamaserve
