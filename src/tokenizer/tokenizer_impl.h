// Internal to the tokenizer library: the tables a Tokenizer shares between its copies, and
// the two encoders (spm_encoder.cc, bpe_encoder.cc).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer_data.h"

namespace llamaserve {

struct BpeMerge {
  int32_t rank = 0;    // position in tokenizer.ggml.merges: lower merges first
  int32_t result = 0;  // id of the merged token
};

inline uint64_t bpe_pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// The GPT-2 byte alphabet: printable Latin-1 bytes stand for themselves, the other 68 bytes
// (controls, space, DEL, NBSP, soft hyphen) for U+0100..U+0143 in byte order, so that every
// byte is a visible code point in the vocabulary.
uint32_t gpt2_byte_to_codepoint(uint8_t byte);
// The byte a code point of that alphabet stands for, or -1.
int gpt2_codepoint_to_byte(uint32_t cp);

struct TokenizerImpl {
  TokenizerData data;
  bool spm = true;  // model "llama"; otherwise byte-level BPE
  PreTokenizerKind pre = PreTokenizerKind::kGpt2;
  // LLaMA 3 looks a whole pre-tokenized piece up in the vocabulary before merging (the
  // reference tokenizer's ignore_merges), which can give a different split than the merges.
  bool ignore_merges = false;

  std::vector<TokenType> types;      // per id, kNormal where the data has none
  std::vector<std::string> decoded;  // per id: token_bytes, or the text of a special token
  // Every vocabulary string to its (first) id; views into data.tokens.
  std::unordered_map<std::string_view, int32_t> piece_to_id;

  // SentencePiece: the pieces merges may produce (normal, user-defined, unused), the
  // <0xXX> byte pieces, and whether any unused piece needs re-splitting.
  std::unordered_map<std::string_view, int32_t> spm_pieces;
  bool spm_has_unused = false;
  // SentencePiece: id of <0xXX> per byte; byte-level BPE: id of the byte's alphabet code
  // point. -1 where the vocabulary lacks it.
  std::array<int32_t, 256> byte_tokens{};
  std::array<std::string, 256> byte_alphabet;  // byte-level BPE: UTF-8 of each byte's code point

  std::unordered_map<uint64_t, BpeMerge> merges;  // bpe_pair_key(left, right)

  // Tokens recognised in text (user-defined always; control and unknown with parse_special),
  // grouped by first byte, longest first.
  std::array<std::vector<int32_t>, 256> specials_by_first_byte;
  std::array<bool, 256> special_first_byte{};

  std::vector<bool> end_of_generation;  // per id

  float score(int32_t id) const { return data.scores.empty() ? 0.0f : data.scores[id]; }

  // Appends the ids of one text fragment (no special tokens inside).
  void encode_spm(std::string_view text, bool add_space_prefix, std::vector<int32_t>& out) const;
  void encode_bpe(std::string_view text, std::vector<int32_t>& out) const;
};

// Builds the encoder tables of each kind; called by Tokenizer::create after the common ones.
Status build_spm_tables(TokenizerImpl& impl);
Status build_bpe_tables(TokenizerImpl& impl);

}  // namespace llamaserve
