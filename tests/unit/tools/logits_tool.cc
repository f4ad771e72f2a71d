// Test helper: the logits our engine computes for a token sequence, for comparison with
// another implementation (tests/py/test_convert.py compares against transformers and a
// numpy llama2.c forward pass), and exact greedy continuations (tests/py/test_quantize.py).
//
//   logits_tool [--reference] [--device D] [--kv-type T] [--generate N] MODEL.gguf OUT.f32
//               TOKEN...
// Runs one prefill of the tokens on the CPU executor (F32 KV cache, or --kv-type f16 | q8_0:
// tests/py/test_kv_cache_accuracy.py) and writes float32
// little-endian logits of every position, [n_tokens][n_vocab]. --reference uses the plain
// reference kernels. --device cuda:N runs the executor of that device instead (CUDA builds;
// F16 KV cache, scripts/gpu_transformers_7b.py). --generate N then decodes N greedy tokens one
// step at a time and prints their ids on stdout, space-separated.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "executor/cpu_executor.h"
#include "model/config.h"
#include "service/layout_factory.h"

namespace {

int fail(const std::string& message) {
  std::fprintf(stderr, "logits_tool: %s\n", message.c_str());
  return 1;
}

constexpr int32_t kBlockSize = 16;

// One sequence whose KV blocks are 0, 1, 2, ...: rows `tokens` at positions from `first`.
llamaserve::Batch make_batch(const std::vector<int32_t>& tokens, int32_t first, bool all_logits) {
  llamaserve::Batch batch;
  batch.tokens = tokens;
  const auto n = static_cast<int32_t>(tokens.size());
  for (int32_t i = 0; i < n; ++i) {
    batch.positions.push_back(first + i);
    batch.seq_index.push_back(0);
    if (all_logits || i == n - 1) batch.logit_rows.push_back(i);
  }
  const int32_t length = first + n;
  batch.blocks_per_seq = (length + kBlockSize - 1) / kBlockSize;
  for (int32_t b = 0; b < batch.blocks_per_seq; ++b) batch.block_tables.push_back(b);
  batch.seq_lengths = {length};
  return batch;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace llamaserve;
  int arg = 1;
  bool reference = false;
  std::string device = "cpu";
  int32_t n_generate = 0;
  // An F32 cache by default: comparisons with other implementations should see the weights'
  // precision, not the cache's.
  TensorType kv_type = TensorType::F32;
  while (arg < argc && std::string(argv[arg]).starts_with("--")) {
    const std::string flag = argv[arg++];
    if (flag == "--reference") {
      reference = true;
    } else if (flag == "--device" && arg < argc) {
      device = argv[arg++];
    } else if (flag == "--kv-type" && arg < argc) {
      auto type = parse_kv_cache_type(argv[arg++]);
      if (!type.is_ok()) return fail(type.status().to_string());
      kv_type = *type;
    } else if (flag == "--generate" && arg < argc) {
      n_generate = static_cast<int32_t>(std::strtol(argv[arg++], nullptr, 10));
    } else {
      return fail("unknown option " + flag);
    }
  }
  if (argc - arg < 3 || n_generate < 0) {
    return fail(
        "usage: logits_tool [--reference] [--device D] [--kv-type T] [--generate N] MODEL.gguf "
        "OUT.f32 TOKEN...");
  }
  const std::string model_path = argv[arg++];
  const std::string out_path = argv[arg++];
  std::vector<int32_t> tokens;
  for (; arg < argc; ++arg) {
    tokens.push_back(static_cast<int32_t>(std::strtol(argv[arg], nullptr, 10)));
  }

  auto model = load_model(model_path);
  if (!model.is_ok()) return fail(model.status().to_string());
  const int64_t n_vocab = (*model)->config.n_vocab;
  for (int32_t t : tokens) {
    if (t < 0 || t >= n_vocab) return fail("token id " + std::to_string(t) + " out of range");
  }
  const auto n = static_cast<int32_t>(tokens.size());
  CpuExecutorOptions options;
  options.threads = 2;
  options.kv_block_size = kBlockSize;
  options.kv_capacity_tokens = (n + n_generate + 2 * kBlockSize) / kBlockSize * kBlockSize;
  options.reference_kernels = reference;
  options.kv_type = kv_type;
  auto executor = [&]() -> Result<std::unique_ptr<Executor>> {
    if (device == "cpu") return create_cpu_executor(*model, options);
    ExecutorOptions gpu;
    gpu.device = device;
    gpu.kv_block_size = kBlockSize;
    gpu.kv_type = kv_type == TensorType::F32 ? TensorType::F16 : kv_type;
    gpu.kv_capacity_tokens = options.kv_capacity_tokens;
    gpu.max_context_tokens = options.kv_capacity_tokens;
    gpu.max_batch_tokens = std::max<int32_t>(n, 16);
    gpu.max_seqs = 2;
    return create_executor(*model, gpu);
  }();
  if (!executor.is_ok()) return fail(executor.status().to_string());

  std::vector<float> logits(static_cast<size_t>(n) * n_vocab);
  Status status = (*executor)->forward(make_batch(tokens, 0, true), logits);
  if (!status.is_ok()) return fail(status.to_string());
  std::ofstream out(out_path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(logits.data()),
            static_cast<std::streamsize>(logits.size() * sizeof(float)));
  if (!out) return fail("cannot write " + out_path);

  std::vector<float> last(logits.end() - n_vocab, logits.end());
  for (int32_t step = 0; step < n_generate; ++step) {
    const auto next =
        static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    std::printf("%s%d", step == 0 ? "" : " ", next);
    status = (*executor)->forward(make_batch({next}, n + step, false), last);
    if (!status.is_ok()) return fail(status.to_string());
  }
  if (n_generate > 0) std::printf("\n");
  return 0;
}
