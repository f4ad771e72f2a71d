// The tokenizer part of a model file, as plain data: what GGUF stores under tokenizer.ggml.*
// and tokenizer.chat_template. Tests build it by hand; models read it from GGUF.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace llamaserve {

class GgufFile;

// tokenizer.ggml.token_type values (the SentencePiece piece types, as GGUF stores them).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // <s>, </s>, <|im_start|>: matched in text only with parse_special
  kUserDefined = 4,  // always matched in text, decoded as its text
  kUnused = 5,
  kByte = 6,  // <0xXX> byte-fallback pieces of SentencePiece vocabularies
};

struct TokenizerData {
  // tokenizer.ggml.model: "llama" = SentencePiece-style BPE over pieces with scores;
  // "gpt2" = byte-level BPE with ranked merges.
  std::string model = "llama";
  // tokenizer.ggml.pre: which pre-tokenizer splits text before byte-level BPE ("default",
  // "llama3"/"llama-bpe", "smollm", "gpt2", "qwen2", ...). Unused by "llama".
  std::string pre = "default";

  std::vector<std::string> tokens;     // id -> piece, as stored in the vocabulary
  std::vector<float> scores;           // id -> merge priority ("llama"); empty = all zero
  std::vector<TokenType> token_types;  // id -> type; empty = all normal
  std::vector<std::string> merges;     // "left right", best (rank 0) first ("gpt2")

  std::optional<int32_t> bos_id;
  std::optional<int32_t> eos_id;
  std::optional<int32_t> unk_id;
  std::optional<int32_t> pad_id;
  std::optional<int32_t> eot_id;

  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;  // "llama": prepend ▁ to text (SentencePiece dummy prefix)

  std::string chat_template;  // tokenizer.chat_template (Jinja text), empty if absent
};

// Reads the tokenizer keys of a GGUF file. Defaults where keys are absent follow the
// conventions of the model kind: "llama" adds BOS and the space prefix, and byte-level BPE
// adds BOS only for the LLaMA 3 pre-tokenizer. Validates sizes and special ids, so a
// Tokenizer built from the result never indexes out of range.
Result<TokenizerData> tokenizer_data_from_gguf(const GgufFile& file);

// Checks the invariants tokenizer_data_from_gguf guarantees (array sizes agree, special ids
// are in range). Tokenizer::create calls it, so hand-built data is checked too.
Status validate_tokenizer_data(const TokenizerData& data);

}  // namespace llamaserve
