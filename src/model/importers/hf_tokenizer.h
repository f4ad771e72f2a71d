// The tokenizer of a Hugging Face model directory, turned into the TokenizerData that GGUF
// stores under tokenizer.ggml.*:
//   tokenizer.model       SentencePiece (LLaMA 2, Mistral): model "llama", pieces + scores
//   tokenizer.json        byte-level BPE (LLaMA 3, SmolLM2): model "gpt2", vocab, merges
//                         ("a b" strings or ["a", "b"] pairs), added tokens; the
//                         pre-tokenizer name (llama-bpe, smollm, gpt2, qwen2) is recognised
//                         from its pre_tokenizer section
//   tokenizer_config.json bos/eos/pad tokens, add_bos_token / add_eos_token, chat_template
//   chat_template.jinja   the chat template, where newer exporters keep it
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "model/importers/sentencepiece_model.h"
#include "tokenizer/tokenizer_data.h"

namespace llamaserve {

// SentencePiece BPE model → "llama" TokenizerData (Unigram models are refused: the engine's
// SentencePiece-style tokenizer merges by score, which only BPE models are trained for).
Result<TokenizerData> tokenizer_from_sentencepiece(const SentencePieceModel& model);

// tokenizer.json text → "gpt2" TokenizerData. Special ids are left unset; they come from
// tokenizer_config.json (apply_tokenizer_config) or config.json.
Result<TokenizerData> tokenizer_from_hf_json(std::string_view tokenizer_json);

// Applies tokenizer_config.json: bos/eos/unk/pad tokens (by text, looked up in the
// vocabulary), add_bos_token / add_eos_token, chat_template (a string, or the "default" entry
// of a list of named templates).
Status apply_tokenizer_config(std::string_view config_json, TokenizerData& data);

// Appends "[PAD<id>]" tokens of type UNUSED until the vocabulary has n_vocab entries (the
// embedding table may be larger than the tokenizer); more tokens than n_vocab is an error.
Status pad_vocabulary(TokenizerData& data, int64_t n_vocab);

struct HfTokenizerDefaults {
  int64_t n_vocab = 0;                  // rows of the embedding table
  std::optional<int64_t> bos_token_id;  // config.json, used when tokenizer_config has none
  std::optional<int64_t> eos_token_id;
};

// The tokenizer files of a model directory, as bytes; nullopt where a file is absent.
struct HfTokenizerFiles {
  std::optional<std::string> tokenizer_model;        // tokenizer.model (SentencePiece)
  std::optional<std::string> tokenizer_json;         // tokenizer.json
  std::optional<std::string> tokenizer_config_json;  // tokenizer_config.json
  std::optional<std::string> chat_template_jinja;    // chat_template.jinja
};

// Everything above from the files' contents (tokenizer.model is preferred over
// tokenizer.json); validated with validate_tokenizer_data.
Result<TokenizerData> hf_tokenizer_from_files(const HfTokenizerFiles& files,
                                              const HfTokenizerDefaults& defaults);

// The same for a model directory, reading the files that exist.
Result<TokenizerData> read_hf_tokenizer(const std::string& dir,
                                        const HfTokenizerDefaults& defaults);

}  // namespace llamaserve
