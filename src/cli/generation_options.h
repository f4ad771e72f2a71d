// Options shared by `llamaserve run` and `llamaserve chat`: the model's spec (file, device,
// threads, CPU kernels, context), bound straight into a ModelSpec, and sampling, with the same
// names and defaults in both.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "engine/generate.h"
#include "engine/request.h"
#include "server/options.h"
#include "service/config.h"

namespace llamaserve::cli {

struct GenerationOptions {
  GenerationOptions() {
    model.engine.max_running = 1;  // one conversation
    model.warmup_tokens = 0;       // the first request is the only one
  }

  ModelSpec model;
  int32_t max_new_tokens = 256;  // -1 = until the context is full or the model stops
  float temperature = 0.8f;      // 0 = greedy
  int32_t top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repeat_penalty = 1.0f;
  std::optional<uint64_t> seed;
  bool ignore_eos = false;
  bool verbose = false;
};

inline void add_generation_options(CLI::App& sub, GenerationOptions& o) {
  sub.add_option("-m,--model", o.model.path, "GGUF model file")->required();
  sub.add_option("-n,--max-tokens", o.max_new_tokens,
                 "tokens to generate (-1 = until the context is full)")
      ->capture_default_str();
  sub.add_option("--temp", o.temperature, "temperature; 0 = greedy (deterministic)")
      ->capture_default_str();
  sub.add_option("--top-k", o.top_k, "keep the k most likely tokens (0 = off)")
      ->capture_default_str();
  sub.add_option("--top-p", o.top_p, "keep the most likely tokens up to this mass (1 = off)")
      ->capture_default_str();
  sub.add_option("--min-p", o.min_p, "drop tokens below this fraction of the best (0 = off)")
      ->capture_default_str();
  sub.add_option("--repeat-penalty", o.repeat_penalty, "repetition penalty (1 = off)")
      ->capture_default_str();
  sub.add_option("--seed", o.seed, "sampling seed (default: random)");
  LayoutSpec& layout = o.model.layout;
  sub.add_option("-t,--threads", layout.threads, "CPU threads (0 = all cores)")
      ->capture_default_str();
  server::add_cpu_isa_option(sub, layout);
  sub.add_option("--device,--devices", layout.device,
                 "cpu, cuda:N, a CUDA device index N, or a device list 0,1 with --tp/--pp")
      ->capture_default_str();
  sub.add_option("--tp", layout.tensor_parallel, "GPUs that split every layer (tensor parallel)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  sub.add_option("--pp", layout.pipeline_parallel, "GPUs that each run a block of layers")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  sub.add_option("--gpu-memory-utilization", layout.gpu_memory_utilization,
                 "fraction of the GPU's memory to use (CUDA devices)")
      ->capture_default_str();
  sub.add_option("-c,--ctx-size", o.model.context_tokens,
                 "context length in tokens (0 = the model's, at most 8192)")
      ->capture_default_str();
  server::add_kv_cache_type_option(sub, o.model);
  sub.add_flag("--ignore-eos", o.ignore_eos, "keep generating past end-of-generation tokens");
  sub.add_flag("--verbose", o.verbose, "print prompt and generation speed to stderr");
}

inline SamplingParams sampling_params(const GenerationOptions& o) {
  SamplingParams params;
  params.temperature = o.temperature;
  params.top_k = o.top_k;
  params.top_p = o.top_p;
  params.min_p = o.min_p;
  params.repetition_penalty = o.repeat_penalty;
  params.seed = o.seed;
  return params;
}

// Tokens to ask for: -n, or what is left of the context; kOutOfRange if the prompt leaves
// no room at all.
inline Result<int32_t> budget_new_tokens(const GenerationOptions& o, size_t n_prompt,
                                         int32_t max_context) {
  const int64_t room = static_cast<int64_t>(max_context) - static_cast<int64_t>(n_prompt);
  if (room < 1) {
    return make_error(StatusCode::kOutOfRange, "the prompt has {} tokens; the context holds {}",
                      n_prompt, max_context);
  }
  if (o.max_new_tokens < 0) return static_cast<int32_t>(room);
  if (o.max_new_tokens == 0)
    return make_error(StatusCode::kInvalidArgument, "-n must be >= 1 or -1");
  return static_cast<int32_t>(std::min<int64_t>(o.max_new_tokens, room));
}

// --verbose: prompt processing and generation speed from a finished request's usage.
inline void print_speed(const Usage& usage) {
  const double prefill_ms = usage.ttft_ms - usage.queue_ms;
  const double prompt_tps = prefill_ms > 0 ? usage.prompt_tokens * 1000.0 / prefill_ms : 0.0;
  std::fprintf(stderr,
               "\nprompt: %d tokens in %.1f ms (%.1f tok/s); generation: %d tokens (%.1f tok/s); "
               "total %.1f ms\n",
               usage.prompt_tokens, prefill_ms, prompt_tps, usage.completion_tokens,
               usage.decode_tokens_per_s, usage.total_ms);
}

}  // namespace llamaserve::cli
