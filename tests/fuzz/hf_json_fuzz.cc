// libFuzzer target for the JSON files of a Hugging Face model directory: config.json
// (model/importers/hf_config.h), tokenizer.json, tokenizer_config.json and chat_template.jinja
// (hf_tokenizer.h). The input holds the files the way `head -v` prints them:
//   ==> config.json <==
//   {...}
//   ==> tokenizer.json <==
//   {...}
// (any of the four names, each at most once; text before the first header is ignored). The
// files go through what `convert` does with them: config.json gives n_vocab and the
// bos/eos ids, then the tokenizer is built from the others. Besides "never crash, never let
// an exception out" (ASan/UBSan; an escaping exception aborts), it checks for every accepted
// input:
//   - an accepted config is a LLaMA/Mistral config that validate_config accepts, with
//     rope_dim == head_dim and finite RoPE scaling factors (the factor > 0);
//   - an accepted tokenizer has exactly n_vocab tokens, types and (SentencePiece) scores
//     for each, special ids inside the vocabulary, and the engine's Tokenizer accepts it and
//     encodes text to ids inside the vocabulary.
// A violated property aborts, which libFuzzer reports as a crash with the input saved.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "model/config.h"
#include "model/importers/hf_config.h"
#include "model/importers/hf_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace llamaserve {
namespace {

// Without config.json the tokenizer is padded to this many rows; a config's vocab_size is
// capped at kMaxFuzzVocab so that one input cannot spend seconds writing padding tokens.
constexpr int64_t kDefaultVocab = 1024;
constexpr int64_t kMaxFuzzVocab = 4096;

[[noreturn]] void fail(const char* what, const std::string& detail = {}) {
  std::fprintf(stderr, "hf_json_fuzz property violated: %s\n", what);
  if (!detail.empty()) std::fprintf(stderr, "  detail: %s\n", detail.c_str());
  std::abort();
}

void check(bool condition, const char* what) {
  if (!condition) fail(what);
}

struct Files {
  std::optional<std::string> config_json;
  HfTokenizerFiles tokenizer;
};

// Splits the input at "==> NAME <==\n" header lines.
Files split_files(std::string_view input) {
  Files files;
  constexpr std::string_view kOpen = "==> ";
  constexpr std::string_view kClose = " <==\n";
  size_t header = input.find(kOpen);
  while (header != std::string_view::npos) {
    const size_t name_begin = header + kOpen.size();
    const size_t name_end = input.find(kClose, name_begin);
    if (name_end == std::string_view::npos) break;
    const std::string_view name = input.substr(name_begin, name_end - name_begin);
    const size_t body_begin = name_end + kClose.size();
    const size_t next = input.find("\n==> ", body_begin);
    const std::string_view body =
        input.substr(body_begin, next == std::string_view::npos ? next : next - body_begin);
    std::optional<std::string>* slot = nullptr;
    if (name == "config.json") slot = &files.config_json;
    if (name == "tokenizer.json") slot = &files.tokenizer.tokenizer_json;
    if (name == "tokenizer_config.json") slot = &files.tokenizer.tokenizer_config_json;
    if (name == "chat_template.jinja") slot = &files.tokenizer.chat_template_jinja;
    if (slot != nullptr && !slot->has_value()) slot->emplace(body);
    header = next == std::string_view::npos ? next : next + 1;
  }
  return files;
}

bool id_in(const std::optional<int32_t>& id, size_t n) {
  return !id || (*id >= 0 && static_cast<size_t>(*id) < n);
}

HfTokenizerDefaults check_config(const std::string& text) {
  HfTokenizerDefaults defaults{kDefaultVocab, std::nullopt, std::nullopt};
  auto hf = parse_hf_config(text);
  if (!hf.is_ok()) {
    check(!hf.status().message().empty(), "error without a message");
    return defaults;
  }
  const ModelConfig& c = hf->config;
  check(hf->architecture == "LlamaForCausalLM" || hf->architecture == "MistralForCausalLM",
        "unsupported architecture accepted");
  check(c.arch == "llama", "arch is not llama");
  check(validate_config(c).is_ok(), "a config validate_config refuses was accepted");
  check(c.rope_dim == c.head_dim, "rope_dim differs from head_dim");
  const RopeScaling& r = c.rope_scaling;
  check(std::isfinite(r.factor) && r.factor > 0.0f, "RoPE scaling factor not finite and > 0");
  check(std::isfinite(r.low_freq_factor) && std::isfinite(r.high_freq_factor),
        "RoPE frequency factors not finite");
  defaults.n_vocab = std::min(c.n_vocab, kMaxFuzzVocab);
  defaults.bos_token_id = hf->bos_token_id;
  defaults.eos_token_id = hf->eos_token_id;
  return defaults;
}

void check_tokenizer(const HfTokenizerFiles& files, const HfTokenizerDefaults& defaults) {
  auto data = hf_tokenizer_from_files(files, defaults);
  if (!data.is_ok()) {
    check(!data.status().message().empty(), "error without a message");
    return;
  }
  const size_t n = data->tokens.size();
  check(static_cast<int64_t>(n) == defaults.n_vocab, "the vocabulary is not padded to n_vocab");
  check(data->token_types.size() == n, "token types differ in count from the tokens");
  check(data->scores.empty() || data->scores.size() == n, "scores differ in count");
  check(id_in(data->bos_id, n) && id_in(data->eos_id, n) && id_in(data->unk_id, n) &&
            id_in(data->pad_id, n) && id_in(data->eot_id, n),
        "special id outside the vocabulary");
  // Text made of a few tokens and the chat template, so that merges and specials happen.
  std::string text = "Hello world, 1234!\n";
  for (size_t i = 0; i < n && text.size() < 256; i += 1 + i / 2) text += data->tokens[i];
  text += data->chat_template.substr(0, 128);

  auto tokenizer = Tokenizer::create(std::move(data).value());
  if (!tokenizer.is_ok()) {
    fail("the engine refuses a tokenizer that convert accepts", tokenizer.status().to_string());
  }
  for (bool parse_special : {false, true}) {
    for (int32_t id : tokenizer->encode(text, /*add_special=*/true, parse_special)) {
      check(id >= 0 && static_cast<size_t>(id) < n, "encode gave an id outside the vocabulary");
    }
  }
}

}  // namespace
}  // namespace llamaserve

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace llamaserve;
  const Files files = split_files(std::string_view(reinterpret_cast<const char*>(data), size));
  HfTokenizerDefaults defaults{kDefaultVocab, std::nullopt, std::nullopt};
  if (files.config_json) defaults = check_config(*files.config_json);
  if (files.tokenizer.tokenizer_json || files.tokenizer.tokenizer_config_json) {
    check_tokenizer(files.tokenizer, defaults);
  }
  return 0;
}
