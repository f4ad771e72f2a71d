// libFuzzer target for the SentencePiece tokenizer.model reader
// (model/importers/sentencepiece_model.h) and the conversion of its result into the GGUF
// tokenizer that `convert` writes (hf_tokenizer.h). The input is the file's bytes. Besides
// "never crash, never read out of bounds" (ASan/UBSan), it checks for every accepted input:
//   - pieces, scores and types have one entry per piece, types are SentencePiece's 1..6;
//   - a converted BPE model keeps the pieces and only special ids inside the vocabulary;
//   - the tokenizer built from the model directory's files (padded to a few more rows, as an
//     embedding table may be larger) has exactly n_vocab tokens, and the engine's Tokenizer
//     accepts it and encodes text to ids inside the vocabulary.
// A violated property aborts, which libFuzzer reports as a crash with the input saved.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "model/importers/hf_tokenizer.h"
#include "model/importers/sentencepiece_model.h"
#include "tokenizer/tokenizer.h"

namespace llamaserve {
namespace {

[[noreturn]] void fail(const char* what, const std::string& detail = {}) {
  std::fprintf(stderr, "sentencepiece_fuzz property violated: %s\n", what);
  if (!detail.empty()) std::fprintf(stderr, "  detail: %s\n", detail.c_str());
  std::abort();
}

void check(bool condition, const char* what) {
  if (!condition) fail(what);
}

bool id_in(const std::optional<int32_t>& id, size_t n) {
  return !id || (*id >= 0 && static_cast<size_t>(*id) < n);
}

void check_ids(const TokenizerData& data) {
  const size_t n = data.tokens.size();
  check(id_in(data.bos_id, n) && id_in(data.eos_id, n) && id_in(data.unk_id, n) &&
            id_in(data.pad_id, n) && id_in(data.eot_id, n),
        "special id outside the vocabulary");
}

}  // namespace
}  // namespace llamaserve

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace llamaserve;
  auto model = parse_sentencepiece_model(data, size);
  if (!model.is_ok()) {
    check(!model.status().message().empty(), "error without a message");
    return 0;
  }
  const size_t n_pieces = model->pieces.size();
  check(n_pieces > 0, "a model without pieces accepted");
  check(model->scores.size() == n_pieces && model->types.size() == n_pieces,
        "pieces, scores and types differ in count");
  for (int32_t type : model->types) check(type >= 1 && type <= 6, "unknown piece type accepted");

  auto converted = tokenizer_from_sentencepiece(*model);
  if (!converted.is_ok()) {
    check(model->model_type != 2, "a BPE model was refused");
    return 0;
  }
  check(converted->tokens == model->pieces, "pieces changed in conversion");
  check_ids(*converted);

  // The model directory path: tokenizer.model alone, embedding table a few rows larger.
  HfTokenizerFiles files;
  files.tokenizer_model.emplace(reinterpret_cast<const char*>(data), size);
  const int64_t n_vocab = static_cast<int64_t>(n_pieces) + data[size - 1] % 4;
  auto tokenizer_data = hf_tokenizer_from_files(files, {n_vocab, std::nullopt, std::nullopt});
  if (!tokenizer_data.is_ok()) {
    check(!tokenizer_data.status().message().empty(), "error without a message");
    return 0;
  }
  check(static_cast<int64_t>(tokenizer_data->tokens.size()) == n_vocab,
        "the vocabulary is not padded to n_vocab");
  check(tokenizer_data->token_types.size() == tokenizer_data->tokens.size() &&
            tokenizer_data->scores.size() == tokenizer_data->tokens.size(),
        "types or scores differ in count from the tokens");
  check_ids(*tokenizer_data);

  auto tokenizer = Tokenizer::create(std::move(tokenizer_data).value());
  if (!tokenizer.is_ok()) {
    fail("the engine refuses a tokenizer that convert accepts", tokenizer.status().to_string());
  }
  // Some text made of the pieces themselves, so that merges happen.
  std::string text;
  for (size_t i = 0; i < n_pieces && text.size() < 256; i += 1 + i / 4) text += model->pieces[i];
  for (bool parse_special : {false, true}) {
    for (int32_t id : tokenizer->encode(text, /*add_special=*/true, parse_special)) {
      check(id >= 0 && id < n_vocab, "encode gave an id outside the vocabulary");
    }
  }
  return 0;
}
