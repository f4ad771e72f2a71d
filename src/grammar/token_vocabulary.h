// TokenVocabulary: the bytes of every token of a tokenizer, arranged as a trie, so that the
// tokens a grammar allows can be found by walking the trie against the grammar once instead
// of matching every token on its own.
//
// Layout: nodes in depth-first preorder (node 0 is the root, the empty string). A node's
// subtree is the node range [i, subtree_end). Token ids sorted by their bytes are in
// `sorted_tokens`; the tokens whose bytes pass through node i are the range
// [token_begin, token_end) of it, and the first `n_exact` of those end exactly at node i.
//
// Tokens with no bytes (control tokens, which decode to nothing) are not in the trie; the
// end-of-generation tokens are listed apart.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace llamaserve::grammar {

class TokenVocabulary {
 public:
  struct Node {
    int32_t subtree_end = 0;
    int32_t token_begin = 0;
    int32_t token_end = 0;
    int32_t n_exact = 0;
    uint16_t depth = 0;
    uint8_t byte = 0;  // the byte on the edge from the parent
    // From this node down, the rest of every token is plain characters (is_plain_ascii or
    // UTF-8 sequences), the last of which may be unfinished: a state that takes any
    // `max_rest_chars` plain characters accepts them all.
    bool plain_rest = true;
    uint16_t max_rest_chars = 0;  // most characters in such a rest (an unfinished one counts)
    uint16_t prefix_chars = 0;    // bytes on the path from the root that start a character
  };

  // token_bytes(id) of every id of the tokenizer (its own decoding: '▁' as a space, <0xXX>
  // byte tokens, the byte-level BPE alphabet).
  static TokenVocabulary from_tokenizer(const Tokenizer& tokenizer);
  // For tests: token i has bytes pieces[i]; `end_tokens` are the end-of-generation ids.
  static TokenVocabulary from_pieces(std::vector<std::string> pieces,
                                     std::vector<int32_t> end_tokens);

  int32_t n_vocab() const { return static_cast<int32_t>(bytes_.size()); }
  const std::string& token_bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int32_t>& sorted_tokens() const { return sorted_tokens_; }
  // Per entry of sorted_tokens(): the bytes that start a character (not 0x80..0xBF), so that
  // the characters of a token below a node are sorted_chars()[t] - node.prefix_chars.
  const std::vector<uint16_t>& sorted_chars() const { return sorted_chars_; }
  const std::vector<int32_t>& end_tokens() const { return end_tokens_; }
  bool is_end_token(int32_t id) const;
  size_t max_token_bytes() const { return max_token_bytes_; }

 private:
  void build();

  std::vector<std::string> bytes_;
  std::vector<int32_t> end_tokens_;  // sorted
  std::vector<Node> nodes_;
  std::vector<int32_t> sorted_tokens_;
  std::vector<uint16_t> sorted_chars_;
  size_t max_token_bytes_ = 0;
};

}  // namespace llamaserve::grammar
