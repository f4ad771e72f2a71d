// Matcher: where a document stands in a grammar, advanced byte by byte, and the set of tokens
// that may come next.
//
// State: a set of "tops", one per live path through the grammar. A top is a state with byte
// edges plus the stack of resume states of the rules it is inside (frames, kept in a pool
// owned by the matcher and shared between tops, hash-consed so that equal stacks have equal
// ids). A top with kCompleteState means the root rule has returned: the document may end.
// Stacks deeper than kMaxStackDepth are dropped: nesting is bounded, and so is the work.
//
// allowed_tokens() walks the vocabulary trie from the root, stepping a copy of the state set
// by each node's byte and skipping every subtree whose state set dies; a subtree of plain
// text under a state that loops on plain text is accepted without reading it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/token_vocabulary.h"

namespace llamaserve::grammar {

// One bit per token of the vocabulary (bit set: allowed).
struct TokenMask {
  std::vector<uint64_t> words;
  int32_t n_tokens = 0;

  void reset(int32_t n_vocab) {
    n_tokens = n_vocab;
    words.assign((static_cast<size_t>(n_vocab) + 63) / 64, 0);
  }
  void allow(int32_t token) {
    words[static_cast<size_t>(token) >> 6] |= uint64_t{1} << (token & 63);
  }
  bool allowed(int32_t token) const {
    return (words[static_cast<size_t>(token) >> 6] >> (token & 63)) & 1;
  }
  size_t count() const;
  // Sets every disallowed logit to -infinity, and those past n_tokens (a model's padded
  // vocabulary rows that the tokenizer does not know).
  void apply(std::span<float> logits) const;
};

class Matcher {
 public:
  static constexpr StateId kCompleteState = -2;
  static constexpr int32_t kMaxStackDepth = 64;

  explicit Matcher(const Grammar& grammar);

  // Consumes bytes; false (and the matcher is dead, with no tops) when they cannot continue
  // a valid document.
  bool advance(std::string_view bytes);
  // The root value is complete: the document may end here.
  bool is_complete() const;
  // No continuation exists (a rejected byte, or the depth limit).
  bool is_dead() const { return tops_.empty(); }
  // The document is complete and no byte can extend it.
  bool must_end() const;

  // Every token whose bytes can continue the document, and (only once it is complete) the
  // vocabulary's end-of-generation tokens. Never empty while the matcher is alive: when the
  // grammar allows no token at all (depth limit), the end tokens are allowed so that the
  // generation stops instead of continuing unconstrained.
  void allowed_tokens(const TokenVocabulary& vocab, TokenMask& mask);

  // A key naming the current state by content (the tops with their whole stacks), equal for
  // matchers of one grammar exactly when they allow the same continuations.
  std::string state_key() const;

  // Trie nodes the last allowed_tokens() stepped the grammar over (a measure of its cost).
  size_t last_nodes_visited() const { return last_nodes_visited_; }

 private:
  struct Frame {
    int32_t parent;  // -1: the root
    StateId resume;
    int32_t depth;  // frames on the stack, this one included
  };
  struct Top {
    StateId state;
    int32_t frame;  // -1: the root rule
    bool operator==(const Top&) const = default;
  };

  int32_t push_frame(int32_t parent, StateId resume);
  // Adds the tops reached by entering `state` with `frame` on the stack (epsilon edges, calls
  // and returns followed).
  void enter(StateId state, int32_t frame, std::vector<Top>& out, int guard);
  void step(std::span<const Top> in, uint8_t byte, std::vector<Top>& out);
  static void add_top(std::vector<Top>& out, Top top);

  const Grammar* grammar_;
  std::vector<Frame> frames_;
  std::unordered_map<uint64_t, int32_t> frame_ids_;
  std::vector<Top> tops_;
  std::vector<Top> scratch_;
  std::vector<std::vector<Top>> levels_;  // allowed_tokens(): the state set per trie depth
  size_t last_nodes_visited_ = 0;
};

}  // namespace llamaserve::grammar
