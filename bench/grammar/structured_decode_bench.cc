// Decode speed with and without a response-format constraint, through the whole engine
// (scheduler, sampler, masks) on the CPU or a GPU: B requests submitted together, each generating
// -n tokens at temperature 1, free or under a JSON Schema whose documents are longer than -n tokens
// (so every step of every sequence is masked, none ends early).
//
//   build/<dir>/bench/grammar/structured_decode_bench [-m MODEL] [-t THREADS] [-n 64]
//                                                     [-b 1,64] [--reps 3] [--device cuda:0]
//
// Reported per case (median of --reps): decode tokens/s over the window in which every
// sequence has its first token (sum of tokens after the first / (last finish - last first
// token)), and tokens/s over the whole wall time (prefill of the short prompts included).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "service/model_service.h"
#include "tokenizer/tokenizer.h"

namespace llamaserve {
namespace {

constexpr const char* kSchema = R"({"type":"object","properties":{
  "people":{"type":"array","minItems":16,"items":{"type":"object","properties":{
    "name":{"type":"string","maxLength":24},
    "age":{"type":"integer","minimum":0,"maximum":120},
    "city":{"type":"string"},
    "role":{"enum":["engineer","teacher","doctor","artist"]}},
    "required":["name","age","city","role"],"additionalProperties":false}}},
  "required":["people"],"additionalProperties":false})";

struct Figures {
  double decode_tokens_per_s = 0;
  double wall_tokens_per_s = 0;
  int64_t tokens = 0;
};

Figures run_case(ModelService& model, const std::vector<int32_t>& prompt, int batch, int tokens,
                 std::shared_ptr<const grammar::Constraint> constraint, int rep) {
  using Clock = std::chrono::steady_clock;
  std::vector<RequestHandle> handles;
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < batch; ++i) {
    GenerationRequest request;
    request.prompt_tokens = prompt;
    request.max_new_tokens = tokens;
    request.ignore_eos = true;
    request.sampling.temperature = 1.0f;
    request.sampling.seed = static_cast<uint64_t>(1000 * rep + i);
    request.sampling.constraint = constraint;
    auto handle = model.engines().submit(std::move(request));
    if (!handle) {
      std::fprintf(stderr, "submit: %s\n", handle.status().to_string().c_str());
      std::exit(1);
    }
    handles.push_back(std::move(handle).value());
  }
  double last_first_ms = 0;
  double last_finish_ms = 0;
  int64_t after_first = 0;
  Figures out;
  for (RequestHandle& handle : handles) {
    while (auto event = handle.next()) {
      if (event->kind != GenerationEvent::Kind::kFinish) continue;
      if (event->finish_reason != FinishReason::kLength) {
        std::fprintf(stderr, "a request ended with %s\n", finish_reason_name(event->finish_reason));
        std::exit(1);
      }
      const Usage& usage = event->usage;
      last_first_ms = std::max(last_first_ms, usage.ttft_ms);
      last_finish_ms = std::max(last_finish_ms, usage.total_ms);
      after_first += usage.completion_tokens - 1;
      out.tokens += usage.completion_tokens;
    }
  }
  const double wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  out.decode_tokens_per_s = after_first / ((last_finish_ms - last_first_ms) / 1000.0);
  out.wall_tokens_per_s = static_cast<double>(out.tokens) / wall_s;
  return out;
}

int main_impl(int argc, char** argv) {
  std::string model_path =
      std::string(LLAMASERVE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  std::string device;  // empty: the CPU
  int threads = 0;
  int tokens = 64;
  int reps = 3;
  std::vector<int> batches = {1, 64};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "-m") {
      model_path = value;
    } else if (flag == "--device") {
      device = value;
    } else if (flag == "-t") {
      threads = std::stoi(value);
    } else if (flag == "-n") {
      tokens = std::stoi(value);
    } else if (flag == "--reps") {
      reps = std::stoi(value);
    } else if (flag == "-b") {
      batches.clear();
      for (size_t at = 0; at < value.size();) {
        size_t comma = value.find(',', at);
        if (comma == std::string::npos) comma = value.size();
        batches.push_back(std::stoi(value.substr(at, comma - at)));
        at = comma + 1;
      }
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  const int max_batch = *std::max_element(batches.begin(), batches.end());
  ModelSpec spec;
  spec.path = model_path;
  spec.context_tokens = 256;
  spec.layout.threads = threads;
  if (!device.empty()) spec.layout.device = device;
  spec.engine.max_running = max_batch;
  spec.engine.max_waiting = max_batch;
  OpenHooks hooks;
  hooks.show_progress = false;
  auto model = ModelService::open(spec, hooks);
  if (!model) {
    std::fprintf(stderr, "%s\n", model.status().to_string().c_str());
    return 1;
  }
  const std::vector<int32_t> prompt =
      (*model)->tokenizer().encode("Here is a list of people as JSON:", true, false);
  auto constraint = (*model)->constraints().get(grammar::FormatKind::kJsonSchema,
                                                nlohmann::ordered_json::parse(kSchema));
  if (!constraint) {
    std::fprintf(stderr, "%s\n", constraint.status().to_string().c_str());
    return 1;
  }
  std::printf(
      "| batch | tokens per sequence | free decode tok/s | schema decode tok/s | "
      "change | free wall tok/s | schema wall tok/s |\n");
  std::printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (int batch : batches) {
    run_case(**model, prompt, batch, 8, nullptr, 99);  // warm-up
    std::vector<Figures> free_runs, schema_runs;
    // Interleaved so that a change in machine load hits both alike.
    for (int rep = 0; rep < reps; ++rep) {
      free_runs.push_back(run_case(**model, prompt, batch, tokens, nullptr, rep));
      schema_runs.push_back(run_case(**model, prompt, batch, tokens, *constraint, rep));
    }
    auto median = [](std::vector<Figures> runs, double Figures::*field) {
      std::sort(runs.begin(), runs.end(),
                [&](const Figures& a, const Figures& b) { return a.*field < b.*field; });
      return runs[runs.size() / 2].*field;
    };
    const double free_decode = median(free_runs, &Figures::decode_tokens_per_s);
    const double schema_decode = median(schema_runs, &Figures::decode_tokens_per_s);
    std::printf("| %d | %d | %.1f | %.1f | %+.1f%% | %.1f | %.1f |\n", batch, tokens, free_decode,
                schema_decode, 100.0 * (schema_decode / free_decode - 1.0),
                median(free_runs, &Figures::wall_tokens_per_s),
                median(schema_runs, &Figures::wall_tokens_per_s));
    std::fflush(stdout);
  }
  const auto stats = (*constraint)->cache_stats();
  std::printf("\nmask cache of the schema: %llu hits, %llu misses\n",
              static_cast<unsigned long long>(stats.hits),
              static_cast<unsigned long long>(stats.misses));
  return 0;
}

}  // namespace
}  // namespace llamaserve

int main(int argc, char** argv) { return llamaserve::main_impl(argc, argv); }
