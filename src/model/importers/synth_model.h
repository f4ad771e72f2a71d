// Synthetic models: the exact tensor shapes of a named model (shapes.h) with random weights
// and a real tokenizer copied from a vocabulary GGUF. For benchmarks, memory planning and
// load tests of shapes too large to download; the text they generate is noise.
//
// Weights are N(0, stddev²)-like (a sum of four uniforms, scaled: bounded and cheap), norms
// are 1, so activations stay finite through any number of layers. Element e of tensor t is a
// hash of (seed, t, e): the file is the same for a seed whatever the thread count.
#pragma once

#include <cstdint>
#include <string>

#include "core/progress.h"
#include "core/status.h"
#include "model/importers/convert.h"

namespace llamaserve {

struct SynthOptions {
  std::string shape;         // shapes.h name: llama2-7b, ..., tiny
  std::string type = "f16";  // file type: f16, q8_0, q4_k_m, ... (file_types.h)
  std::string output_path;   // write_synthetic_model only
  std::string vocab_path;    // GGUF whose tokenizer.* keys are copied; must match n_vocab
  uint64_t seed = 0;
  float stddev = 0.02f;
  int threads = 0;  // 0: all cores
  ProgressStyle progress = ProgressStyle::kAuto;
};

Result<ConvertSummary> write_synthetic_model(const SynthOptions& options);

// The same file, byte for byte, written into `fd`: an empty file open for reading and writing,
// such as a memfd (synth_memory.h). output_path is not used.
Result<ConvertSummary> write_synthetic_model_to_fd(const SynthOptions& options, int fd);

// The generator behind the weights, exposed for tests: value of element `index` of tensor
// `tensor_index` for `seed`, with standard deviation 1.
float synthetic_value(uint64_t seed, uint64_t tensor_index, uint64_t index);

}  // namespace llamaserve
