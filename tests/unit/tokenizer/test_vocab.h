// Small hand-made vocabularies for unit tests, one of each kind.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace llamaserve::testing_vocab {

// The GPT-2 byte alphabet, written out independently of the library's table.
inline std::string byte_char(int byte) {
  const bool printable =
      (byte >= 0x21 && byte <= 0x7E) || (byte >= 0xA1 && byte <= 0xAC) || byte >= 0xAE;
  int cp = byte;
  if (!printable) {
    cp = 256;
    for (int b = 0; b < byte; ++b) {
      if (!((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)) ++cp;
    }
  }
  std::string out;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return out;
}

inline void add(TokenizerData& data, std::string piece, TokenType type, float score = 0) {
  data.tokens.push_back(std::move(piece));
  data.token_types.push_back(type);
  data.scores.push_back(score);
}

inline int32_t id_of(const TokenizerData& data, std::string_view piece) {
  for (size_t i = 0; i < data.tokens.size(); ++i) {
    if (data.tokens[i] == piece) return static_cast<int32_t>(i);
  }
  return -1;
}

// SentencePiece-style: <unk> <s> </s>, 256 byte pieces, then scored pieces.
//   0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, then the pieces below in order.
inline TokenizerData spm_vocab() {
  TokenizerData data;
  data.model = "llama";
  add(data, "<unk>", TokenType::kUnknown);
  add(data, "<s>", TokenType::kControl);
  add(data, "</s>", TokenType::kControl);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    add(data, name, TokenType::kByte);
  }
  const std::pair<const char*, float> pieces[] = {
      {"\xE2\x96\x81", -1},
      {"a", -2},
      {"b", -3},
      {"c", -4},
      {"ab", -10},
      {"bc", -5},
      {"aa", -6},
      {"\xE2\x96\x81"
       "a",
       -7},
      {"h", -8},
      {"i", -9},
      {"hi", -11},
      {"\xE2\x96\x81"
       "hi",
       -12},
      {"\xE2\x96\x81\xE2\x96\x81", -13},
      {"x", -14},
      {"\xE4\xB8\xAD", -15},  // 中
  };
  for (const auto& [piece, score] : pieces) add(data, piece, TokenType::kNormal, score);
  add(data, "<|user|>", TokenType::kUserDefined);
  data.bos_id = 1;
  data.eos_id = 2;
  data.unk_id = 0;
  data.add_bos = true;
  data.add_space_prefix = true;
  return data;
}

// Byte-level BPE: the 256 alphabet tokens (id = byte), merged tokens, then control tokens.
inline TokenizerData bpe_vocab() {
  TokenizerData data;
  data.model = "gpt2";
  data.pre = "llama3";
  for (int b = 0; b < 256; ++b) add(data, byte_char(b), TokenType::kNormal);
  const std::string space = byte_char(' ');
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"},
      {"l", "l"},
      {"he", "ll"},
      {"hell", "o"},
      {space, "w"},
      {"o", "r"},
      {space + "w", "or"},
      {"l", "d"},
      {space + "wor", "ld"},
      {"a", "a"},
      {"aa", "aa"},
      // 中 is E4 B8 AD
      {byte_char(0xE4), byte_char(0xB8)},
      {byte_char(0xE4) + byte_char(0xB8), byte_char(0xAD)},
  };
  for (const auto& [left, right] : merges) {
    data.merges.push_back(left + " " + right);
    if (id_of(data, left + right) < 0) add(data, left + right, TokenType::kNormal);
  }
  add(data, "<|begin|>", TokenType::kControl);
  add(data, "<|end|>", TokenType::kControl);
  add(data, "<|eot_id|>", TokenType::kControl);
  add(data, "<tool>", TokenType::kUserDefined);
  data.scores.clear();
  data.bos_id = id_of(data, "<|begin|>");
  data.eos_id = id_of(data, "<|end|>");
  data.add_bos = true;
  return data;
}

}  // namespace llamaserve::testing_vocab
