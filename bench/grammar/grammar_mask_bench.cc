// Token-mask computation (grammar/matcher.h) on the real vocabularies: microseconds per mask
// for typical states of a structured-output document, without the per-state mask cache (each
// iteration walks the vocabulary trie again), and the cost of one cache lookup.
//
//   build/<dir>/bench/grammar/grammar_mask_bench [--benchmark_filter=Llama3]
//
// Vocabularies: SmolLM2 (49,152 tokens, the default model), the LLaMA 3 fixture (128,256) and
// the LLaMA 2 fixture (32,000). Counters: tokens allowed and trie nodes the walk stepped.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "grammar/constraint.h"
#include "grammar/schema_compiler.h"
#include "tokenizer/tokenizer.h"

namespace llamaserve::grammar {
namespace {

constexpr const char* kSchema = R"({"type":"object","properties":{
  "name":{"type":"string"},
  "city":{"type":"string","maxLength":24},
  "age":{"type":"integer","minimum":0,"maximum":150},
  "kind":{"enum":["alpha","beta","gamma"]},
  "tags":{"type":"array","items":{"type":"string","pattern":"^[a-z]{2,8}$"},"maxItems":4},
  "score":{"type":"number"}},
  "required":["name","city","age","kind","tags","score"],"additionalProperties":false})";

struct State {
  const char* name;
  const char* prefix;  // document bytes before the mask
};

const State kStates[] = {
    {"start", ""},
    {"key", "{\"name\": \"Ann\", "},
    {"free_string", "{\"name\": \"Ann Le"},
    {"bounded_string", "{\"name\": \"Ann\", \"city\": \"Par"},
    {"integer", "{\"name\": \"Ann\", \"city\": \"Paris\", \"age\": 4"},
    {"enum", "{\"name\": \"Ann\", \"city\": \"Paris\", \"age\": 42, \"kind\": \"b"},
    {"pattern",
     "{\"name\": \"Ann\", \"city\": \"Paris\", \"age\": 42, \"kind\": \"beta\", "
     "\"tags\": [\"ab"},
    {"number",
     "{\"name\": \"A\", \"city\": \"P\", \"age\": 4, \"kind\": \"beta\", \"tags\": [], "
     "\"score\": 3.1"},
};

struct Vocab {
  const char* name;
  std::string path;
};

const Vocab kVocabs[] = {
    {"SmolLM2", std::string(LLAMASERVE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf"},
    {"Llama3", std::string(LLAMASERVE_SOURCE_DIR) + "/tests/fixtures/vocab-llama3-bpe.gguf"},
    {"Llama2", std::string(LLAMASERVE_SOURCE_DIR) + "/tests/fixtures/vocab-llama2-spm.gguf"},
};

std::shared_ptr<const TokenVocabulary> load_vocab(const std::string& path) {
  auto file = GgufFile::open(path);
  if (!file) return nullptr;
  auto tokenizer = Tokenizer::from_gguf(**file);
  if (!tokenizer) return nullptr;
  return std::make_shared<const TokenVocabulary>(TokenVocabulary::from_tokenizer(*tokenizer));
}

const Grammar& grammar() {
  static const Grammar g = compile_json_schema(nlohmann::ordered_json::parse(kSchema)).value();
  return g;
}

void BM_Mask(benchmark::State& bench, std::shared_ptr<const TokenVocabulary> vocab,
             const State* state) {
  Matcher matcher(grammar());
  if (!matcher.advance(state->prefix)) {
    bench.SkipWithError("the prefix does not match the schema");
    return;
  }
  TokenMask mask;
  for (auto _ : bench) {
    matcher.allowed_tokens(*vocab, mask);
    benchmark::DoNotOptimize(mask.words.data());
  }
  bench.counters["allowed"] = static_cast<double>(mask.count());
  bench.counters["nodes"] = static_cast<double>(matcher.last_nodes_visited());
}

// The steady state of a batch: the mask of a state already seen, from the shared cache.
void BM_CachedMask(benchmark::State& bench, std::shared_ptr<const TokenVocabulary> vocab) {
  auto constraint = std::make_shared<const Constraint>(grammar(), vocab);
  Matcher warm(grammar());
  warm.advance(kStates[2].prefix);
  constraint->allowed_tokens(warm);
  Matcher matcher(grammar());
  matcher.advance(kStates[2].prefix);
  for (auto _ : bench) {
    auto mask = constraint->allowed_tokens(matcher);
    benchmark::DoNotOptimize(mask.get());
  }
}

void register_all() {
  for (const Vocab& v : kVocabs) {
    if (!std::filesystem::exists(v.path)) continue;
    auto vocab = load_vocab(v.path);
    if (!vocab) continue;
    for (const State& s : kStates) {
      benchmark::RegisterBenchmark((std::string("Mask/") + v.name + "/" + s.name).c_str(), BM_Mask,
                                   vocab, &s)
          ->Unit(benchmark::kMicrosecond);
    }
    benchmark::RegisterBenchmark((std::string("CachedMask/") + v.name).c_str(), BM_CachedMask,
                                 vocab)
        ->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace
}  // namespace llamaserve::grammar

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  llamaserve::grammar::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
