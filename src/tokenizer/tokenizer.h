// Text <-> token ids for the two vocabulary kinds GGUF models use:
//
//   "llama" — SentencePiece-style BPE (LLaMA 2, Mistral): ' ' becomes U+2581 '▁', a '▁' is
//             prepended to the text (add_space_prefix), adjacent symbols are merged highest
//             piece score first (leftmost on ties), and characters the vocabulary lacks fall
//             back to <0xXX> byte pieces.
//   "gpt2"  — byte-level BPE (LLaMA 3, SmolLM2, Qwen2): a pre-tokenizer (pre_tokenizer.h)
//             cuts the text, every byte becomes one code point of the GPT-2 byte alphabet,
//             and merges apply lowest rank first (leftmost on ties).
//
// Special tokens. User-defined tokens are always recognised in text; control tokens
// (<s>, <|im_start|>, <|eot_id|>) and the unknown token only with parse_special. Either way
// they are split out first and the text between them is tokenized separately (for "llama",
// each such piece at the start or after a special token gets the '▁' prefix, as the
// reference tokenizers do).
//
// Decoding. token_bytes() gives the bytes a token stands for: '▁' → ' ', <0xXX> → that byte,
// GPT-2 alphabet → raw bytes. Control and unknown tokens stand for nothing unless the caller
// asks for their text (render_special / !skip_special): they are markup, not content. The
// bytes of one token need not be valid UTF-8 (a character may span tokens); StreamDecoder
// (stream_decoder.h) turns a token stream into valid UTF-8.
//
// A Tokenizer is immutable after create(); copies share the tables, and every method is
// safe to call from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/tokenizer_data.h"

namespace llamaserve {

class GgufFile;
struct TokenizerImpl;

// A byte range [begin, end) of a text.
struct TextRange {
  size_t begin = 0;
  size_t end = 0;
};

class Tokenizer {
 public:
  // Validates the data and builds the lookup tables (vocabulary map, merge table, special
  // token matcher). Fails for an unknown model or pre-tokenizer, or inconsistent data.
  static Result<Tokenizer> create(TokenizerData data);
  // tokenizer_data_from_gguf + create.
  static Result<Tokenizer> from_gguf(const GgufFile& file);

  // Token ids of `text` (any bytes; ill-formed UTF-8 is tokenized byte by byte, never
  // rejected). add_special adds BOS and/or EOS as the model's add_bos/add_eos flags say.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;
  // encode(text, add_special, /*parse_special=*/true), except that no special token is
  // recognised inside (or reaching into) `plain_ranges` (sorted, non-overlapping): for a chat
  // prompt, the message contents (ChatPrompt::content_ranges), so that a client cannot
  // inject control tokens such as <|im_end|> through its text.
  std::vector<int32_t> encode_guarded(std::string_view text, bool add_special,
                                      std::span<const TextRange> plain_ranges) const;

  // The vocabulary string of a token ("▁the", "Ġthe", "<0x0A>", "<|im_end|>"); empty for an id
  // outside the vocabulary.
  std::string_view token_piece(int32_t id) const;
  // The bytes a token decodes to (see the top of this file). Control/unknown tokens give their
  // text only when render_special is set. Empty for an id outside the vocabulary.
  std::string token_bytes(int32_t id, bool render_special = false) const;
  // Concatenated token bytes. For "llama" with add_space_prefix the space that encode()
  // prepends is removed again from the first piece that produces output, so that
  // decode(encode(s)) == s; ids outside the vocabulary are skipped. The result is raw bytes
  // (a sequence cut inside a character is not valid UTF-8); use StreamDecoder or
  // unicode::sanitize_utf8 for text that must be valid.
  std::string decode(std::span<const int32_t> ids, bool skip_special) const;

  int32_t n_vocab() const;
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  std::optional<int32_t> eot_id() const;
  bool add_bos() const;
  // Control or unknown tokens: markup that decoding skips unless asked.
  bool is_special(int32_t id) const;
  TokenType token_type(int32_t id) const;
  // True for tokens that end a generated turn: eos, eot, and the control tokens models use
  // for that (<|im_end|>, <|eot_id|>, <|eom_id|>, <|end_of_text|>, <|endoftext|>, <|end|>,
  // <end_of_turn>, </s>).
  bool is_end_of_generation(int32_t id) const;
  // Id of the token whose vocabulary string is exactly `piece`.
  std::optional<int32_t> find_token(std::string_view piece) const;

  const TokenizerData& data() const;

 private:
  explicit Tokenizer(std::shared_ptr<const TokenizerImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const TokenizerImpl> impl_;
};

}  // namespace llamaserve
