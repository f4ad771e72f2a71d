// Test helper: the logits our engine computes for a token sequence, for comparison with
// another implementation (tests/py/test_convert.py compares against transformers and a
// numpy llama2.c forward pass).
//
//   logits_tool [--reference] MODEL.gguf OUT.f32 TOKEN...
// Runs one prefill of the tokens on the CPU executor (F32 KV cache) and writes float32
// little-endian logits of every position, [n_tokens][n_vocab]. --reference uses the plain
// reference kernels.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "parallel/cpu_executor.h"

namespace {

int fail(const std::string& message) {
  std::fprintf(stderr, "logits_tool: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace llamaserve;
  int arg = 1;
  bool reference = false;
  if (arg < argc && std::string(argv[arg]) == "--reference") {
    reference = true;
    ++arg;
  }
  if (argc - arg < 3) return fail("usage: logits_tool [--reference] MODEL.gguf OUT.f32 TOKEN...");
  const std::string model_path = argv[arg++];
  const std::string out_path = argv[arg++];
  std::vector<int32_t> tokens;
  for (; arg < argc; ++arg)
    tokens.push_back(static_cast<int32_t>(std::strtol(argv[arg], nullptr, 10)));

  auto model = load_model(model_path);
  if (!model.is_ok()) return fail(model.status().to_string());
  const int64_t n_vocab = (*model)->config.n_vocab;
  for (int32_t t : tokens) {
    if (t < 0 || t >= n_vocab) return fail("token id " + std::to_string(t) + " out of range");
  }
  constexpr int32_t kBlockSize = 16;
  const auto n = static_cast<int32_t>(tokens.size());
  const int32_t n_blocks = (n + kBlockSize - 1) / kBlockSize;
  CpuExecutorOptions options;
  options.threads = 2;
  options.kv_block_size = kBlockSize;
  options.kv_capacity_tokens = static_cast<int64_t>(n_blocks + 1) * kBlockSize;
  options.reference_kernels = reference;
  // An F32 cache: comparisons with other implementations should see the weights' precision,
  // not the cache's.
  options.kv_type = TensorType::F32;
  auto executor = create_cpu_executor(*model, options);
  if (!executor.is_ok()) return fail(executor.status().to_string());

  Batch batch;
  batch.tokens = tokens;
  for (int32_t i = 0; i < n; ++i) {
    batch.positions.push_back(i);
    batch.seq_index.push_back(0);
    batch.logit_rows.push_back(i);
  }
  batch.blocks_per_seq = n_blocks;
  for (int32_t b = 0; b < n_blocks; ++b) batch.block_tables.push_back(b);
  batch.seq_lengths = {n};
  std::vector<float> logits(static_cast<size_t>(n) * n_vocab);
  const Status status = (*executor)->forward(batch, logits);
  if (!status.is_ok()) return fail(status.to_string());
  std::ofstream out(out_path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(logits.data()),
            static_cast<std::streamsize>(logits.size() * sizeof(float)));
  return out ? 0 : fail("cannot write " + out_path);
}
