// The CPU executor against Hugging Face transformers (float32), through the fixtures that
// scripts/make_reference.py wrote: full logits of the last prompt positions within a stated
// tolerance, and the same 32-token greedy continuation.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "executor/cpu_executor.h"

namespace llamaserve {
namespace {

namespace fs = std::filesystem;

const fs::path kFixtures = fs::path(LLAMASERVE_SOURCE_DIR) / "tests" / "fixtures" / "reference";

struct ReferencePrompt {
  std::vector<int32_t> tokens;
  std::vector<int32_t> logit_positions;
  std::vector<int32_t> greedy;
  std::vector<int32_t> greedy_runner_up;
  std::vector<double> greedy_margins;  // logit of greedy minus logit of runner-up
};

struct Reference {
  fs::path model_path;
  int64_t n_vocab = 0;
  std::vector<ReferencePrompt> prompts;
  std::vector<float> logits;  // [prompt][position][n_vocab]
};

Reference load_reference(const std::string& name) {
  Reference ref;
  std::ifstream meta_file(kFixtures / (name + ".json"));
  EXPECT_TRUE(meta_file.good()) << name;
  const nlohmann::json meta = nlohmann::json::parse(meta_file);
  const std::string model = meta["model"];
  ref.model_path =
      model.rfind("models/", 0) == 0 ? fs::path(LLAMASERVE_SOURCE_DIR) / model : kFixtures / model;
  ref.n_vocab = meta["n_vocab"];
  for (const auto& p : meta["prompts"]) {
    ReferencePrompt prompt;
    prompt.tokens = p["tokens"].get<std::vector<int32_t>>();
    prompt.logit_positions = p["logit_positions"].get<std::vector<int32_t>>();
    prompt.greedy = p["greedy"].get<std::vector<int32_t>>();
    prompt.greedy_runner_up = p["greedy_runner_up"].get<std::vector<int32_t>>();
    prompt.greedy_margins = p["greedy_margins"].get<std::vector<double>>();
    ref.prompts.push_back(std::move(prompt));
  }
  std::ifstream logits_file(kFixtures / meta["logits_file"].get<std::string>(), std::ios::binary);
  size_t count = 0;
  for (const auto& p : ref.prompts)
    count += p.logit_positions.size() * static_cast<size_t>(ref.n_vocab);
  ref.logits.resize(count);
  logits_file.read(reinterpret_cast<char*>(ref.logits.data()),
                   static_cast<std::streamsize>(count * sizeof(float)));
  EXPECT_TRUE(logits_file.good()) << "short logits file for " << name;
  return ref;
}

// A batch of one sequence whose blocks are 0, 1, 2, ... in order.
Batch single_sequence(const std::vector<int32_t>& tokens, int32_t first_position,
                      int32_t blocks_per_seq) {
  Batch b;
  for (size_t i = 0; i < tokens.size(); ++i) {
    b.tokens.push_back(tokens[i]);
    b.positions.push_back(first_position + static_cast<int32_t>(i));
    b.seq_index.push_back(0);
  }
  b.blocks_per_seq = blocks_per_seq;
  for (int32_t i = 0; i < blocks_per_seq; ++i) b.block_tables.push_back(i);
  b.seq_lengths = {first_position + static_cast<int32_t>(tokens.size())};
  return b;
}

int32_t argmax(const float* x, int64_t n) {
  return static_cast<int32_t>(std::max_element(x, x + n) - x);
}

struct Case {
  std::string fixture;
  bool reference_kernels;
  // max |logit - reference| over the compared rows, relative to the largest |reference logit|
  // of the row.
  double tolerance;
  // Absolute bound on the error of a greedy step's top-1 minus runner-up logit margin.
  double margin_tolerance;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string name = info.param.fixture + (info.param.reference_kernels ? "_ref" : "_fast");
  std::replace_if(
      name.begin(), name.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); },
      '_');
  return name;
}

class ReferenceTest : public ::testing::TestWithParam<Case> {};

TEST_P(ReferenceTest, LogitsAndGreedyMatchTransformers) {
  const Case& c = GetParam();
  const Reference ref = load_reference(c.fixture);
  if (!fs::exists(ref.model_path))
    GTEST_SKIP() << ref.model_path << " is missing (scripts/fetch_model.sh)";
  auto model = load_model(ref.model_path.string());
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  ASSERT_EQ((*model)->config.n_vocab, ref.n_vocab);
  CpuExecutorOptions options;
  options.kv_capacity_tokens = 512;
  options.reference_kernels = c.reference_kernels;
  auto executor = create_cpu_executor(*model, options);
  ASSERT_TRUE(executor.is_ok()) << executor.status().to_string();
  Executor& ex = **executor;
  const int64_t n_vocab = ref.n_vocab;
  const int32_t blocks_per_seq = 512 / options.kv_block_size;

  size_t logits_offset = 0;
  for (size_t p = 0; p < ref.prompts.size(); ++p) {
    const ReferencePrompt& prompt = ref.prompts[p];
    Batch batch = single_sequence(prompt.tokens, 0, blocks_per_seq);
    batch.logit_rows = prompt.logit_positions;
    std::vector<float> logits(batch.logit_rows.size() * n_vocab);
    ASSERT_TRUE(ex.forward(batch, logits).is_ok());
    double worst = 0.0;
    for (size_t r = 0; r < prompt.logit_positions.size(); ++r) {
      const float* want = ref.logits.data() + logits_offset + r * n_vocab;
      const float* got = logits.data() + r * n_vocab;
      double scale = 0.0, err = 0.0;
      for (int64_t i = 0; i < n_vocab; ++i) {
        scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
        err = std::max(err, std::fabs(static_cast<double>(got[i]) - want[i]));
      }
      worst = std::max(worst, err / scale);
    }
    logits_offset += prompt.logit_positions.size() * n_vocab;
    EXPECT_LE(worst, c.tolerance) << "prompt " << p;
    RecordProperty("max_rel_error_prompt_" + std::to_string(p), std::to_string(worst));
    std::printf("[ %s prompt %zu: max logit error / max |logit| = %.2e ]\n", c.fixture.c_str(), p,
                worst);

    // Greedy decoding, one token per forward pass, twice:
    //  free running (our tokens fed back): identical to the reference until the first step
    //  whose reference margin (top-1 minus runner-up) is below margin_tolerance, where either
    //  choice is within tolerance and the continuations may part;
    //  teacher forced (the reference's tokens fed back): at every step our margin between the
    //  reference's top-1 and runner-up is within margin_tolerance of the reference margin.
    const int32_t prompt_length = batch.n_tokens();
    size_t determined = prompt.greedy.size();
    for (size_t step = 0; step < prompt.greedy.size(); ++step) {
      if (prompt.greedy_margins[step] < c.margin_tolerance) {
        determined = step;
        break;
      }
    }
    // The prompt's K/V stay in the cache; each pass overwrites only positions after it.
    ASSERT_EQ(prompt.logit_positions.back(), prompt_length - 1);
    const std::vector<float> prompt_last(logits.end() - n_vocab, logits.end());
    for (bool teacher_forced : {false, true}) {
      std::vector<float> last = prompt_last;
      std::vector<int32_t> greedy;
      double worst_margin_error = 0.0;
      int32_t position = prompt_length;
      for (size_t step = 0; step < prompt.greedy.size(); ++step) {
        const int32_t token = argmax(last.data(), n_vocab);
        greedy.push_back(token);
        if (teacher_forced) {
          const double margin =
              static_cast<double>(last[prompt.greedy[step]]) - last[prompt.greedy_runner_up[step]];
          worst_margin_error =
              std::max(worst_margin_error, std::fabs(margin - prompt.greedy_margins[step]));
          if (prompt.greedy_margins[step] >= c.margin_tolerance) {
            EXPECT_EQ(token, prompt.greedy[step])
                << "prompt " << p << " teacher-forced step " << step;
          }
        }
        Batch next = single_sequence({teacher_forced ? prompt.greedy[step] : token}, position++,
                                     blocks_per_seq);
        next.logit_rows = {0};
        ASSERT_TRUE(ex.forward(next, last).is_ok());
      }
      if (teacher_forced) {
        EXPECT_LE(worst_margin_error, c.margin_tolerance) << "prompt " << p;
        std::printf("[ %s prompt %zu: worst greedy margin error %.3g ]\n", c.fixture.c_str(), p,
                    worst_margin_error);
      } else {
        const std::vector<int32_t> want(prompt.greedy.begin(), prompt.greedy.begin() + determined);
        const std::vector<int32_t> got(greedy.begin(), greedy.begin() + determined);
        EXPECT_EQ(got, want) << "prompt " << p << ": first " << determined << " greedy tokens";
        if (determined < prompt.greedy.size()) {
          std::printf(
              "[ %s prompt %zu: reference margin %.3g at step %zu is within the tolerance; "
              "compared %zu tokens ]\n",
              c.fixture.c_str(), p, prompt.greedy_margins[determined], determined, determined);
        }
      }
    }
  }
}

// Tolerances. With reference kernels only the f16 KV cache and the summation order differ
// from float32 torch. The fast path also rounds the activations of every quantized-weight
// matmul to 8-bit blocks, as integer-dot CPU engines do: about 1% noise per matmul input,
// which grows through the layers to a few percent of the logit range (F16/BF16 weights keep
// float activations and match as closely as the reference kernels).
// Measured (max over prompts, relative logit error / absolute margin error): reference
// kernels < 6e-4 / 0.015; fast F16 5e-4 / 0.009; fast Q8_0 1e-2 / 0.87 (logits near 100);
// fast Q4_K + Q6_K 2.4e-2 / 0.39; fast qwen2 Q8_0 1.7e-2 / 0.2; SmolLM2 Q4_1 7.4e-2 / 0.45.
// The SmolLM2 figure is what 8-bit activations do to that model, not a kernel error: llama.cpp
// differs from float32 by 7.0e-2 on it (docs/cpu.md), and the fast kernels match the reference
// kernels on the same 8-bit blocks to 2e-5 (kernels_test.cc, DotTest and PackedTest). It moves
// with the order of the float sums: the row-layout Q4_1 kernels gave 5.6e-2, the packed tiles
// (packed_weight.h) 7.4e-2 on one prompt and 3.1e-2 on another, their logits 3% of the range
// apart, as a last-bit difference flips the rounding of some 8-bit activation in a later layer.
INSTANTIATE_TEST_SUITE_P(Fixtures, ReferenceTest,
                         ::testing::Values(Case{"tiny-llama-f16", true, 1e-3, 0.03},
                                           Case{"tiny-llama-f16", false, 1e-3, 0.03},
                                           Case{"tiny-gqa-q8_0", true, 1e-3, 0.03},
                                           Case{"tiny-gqa-q8_0", false, 1.5e-2, 1.5},
                                           Case{"tiny-gqa-q4_k", true, 1e-3, 0.03},
                                           Case{"tiny-gqa-q4_k", false, 3e-2, 0.8},
                                           Case{"tiny-qwen2-q8_0", true, 1e-3, 0.03},
                                           Case{"tiny-qwen2-q8_0", false, 3e-2, 0.4},
                                           Case{"smollm2-135m-q4_1", false, 8e-2, 1.0}),
                         case_name);

}  // namespace
}  // namespace llamaserve
