// Grammar: the automaton that constrained decoding runs. A grammar is a set of byte automata
// ("rules") that may call each other, i.e. a pushdown automaton over bytes:
//
//   - a state has byte edges (a byte range to a next state), epsilon edges, and call edges
//     (enter the rule that starts at `callee`; when it returns, continue at `resume`);
//   - an accepting state ends its rule: the caller continues at the resume state it pushed;
//     ending the root rule completes the document;
//   - several edges may leave a state on the same byte (anyOf, regular expressions): a
//     matcher follows every path at once.
//
// GrammarBuilder makes one (schema_compiler.h builds them from JSON Schema); finish()
// precomputes each state's epsilon closure so that matching never searches for it.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace llamaserve::grammar {

using StateId = int32_t;
constexpr StateId kNoState = -1;

struct ByteEdge {
  uint8_t lo = 0;  // inclusive byte range
  uint8_t hi = 0;
  StateId target = kNoState;
};

struct CallEdge {
  StateId callee = kNoState;  // start state of the called rule
  StateId resume = kNoState;  // where the caller continues once it returns
};

// A JSON string body byte that needs no escape: 0x20..0x7F except '"' and '\', or any byte of
// a multi-byte UTF-8 sequence. The rules use this for "one character of free text".
bool is_plain_ascii(uint8_t byte);
// Continuation bytes a UTF-8 lead byte announces (0 for ASCII, -1 for bytes that cannot lead).
// Overlong forms and surrogates are not rejected: strings are checked for shape, not for
// every rule of RFC 3629.
int utf8_continuations(uint8_t lead);

class Grammar {
 public:
  struct State {
    uint32_t bytes_begin = 0, bytes_end = 0;          // byte_edges_
    uint32_t consuming_begin = 0, consuming_end = 0;  // closure_states_
    uint32_t calls_begin = 0, calls_end = 0;          // closure_calls_
    // The epsilon closure holds an accepting state: being here may end the rule.
    bool returns = false;
    // The closure is this state alone, with byte edges, no calls and no return: the matcher's
    // fast path.
    bool simple = false;
    // How many more plain characters (is_plain_ascii, or UTF-8 sequences) this state takes
    // whatever they are, staying a single path that does nothing else: a run of at most that
    // many (the last one possibly unfinished) can be accepted unread. 0: none known.
    int32_t plain_budget = 0;
  };

  StateId root() const { return root_; }
  size_t n_states() const { return states_.size(); }
  const State& state(StateId id) const { return states_[static_cast<size_t>(id)]; }
  std::span<const ByteEdge> byte_edges(const State& s) const {
    return {byte_edges_.data() + s.bytes_begin, s.bytes_end - s.bytes_begin};
  }
  // States of the epsilon closure that have byte edges (the state itself first if it has).
  std::span<const StateId> consuming_closure(const State& s) const {
    return {closure_states_.data() + s.consuming_begin, s.consuming_end - s.consuming_begin};
  }
  // Call edges leaving any state of the epsilon closure.
  std::span<const CallEdge> calls_closure(const State& s) const {
    return {closure_calls_.data() + s.calls_begin, s.calls_end - s.calls_begin};
  }

 private:
  friend class GrammarBuilder;
  std::vector<State> states_;
  std::vector<ByteEdge> byte_edges_;
  std::vector<StateId> closure_states_;
  std::vector<CallEdge> closure_calls_;
  StateId root_ = kNoState;
};

// Limits that keep a hostile schema from building an automaton that does not fit in memory.
struct GrammarLimits {
  size_t max_states = 400'000;
  size_t max_closure_entries = 4'000'000;
};

class GrammarBuilder {
 public:
  StateId add_state();
  void add_bytes(StateId from, uint8_t lo, uint8_t hi, StateId to);
  // One UTF-8 character of two to four bytes from `from` to `to`: a lead byte, then its
  // continuation bytes.
  void add_utf8_multibyte(StateId from, StateId to);
  void add_epsilon(StateId from, StateId to);
  void add_call(StateId from, StateId callee, StateId resume);
  // The bytes of `text` one after the other from `from`; returns the state after the last.
  StateId add_literal(StateId from, std::string_view text);
  void set_accept(StateId state);
  // See Grammar::State::plain_budget; kUnbounded for a state that loops on plain characters.
  static constexpr int32_t kUnbounded = 1 << 30;
  void set_plain_budget(StateId state, int32_t budget);
  size_t n_states() const { return states_.size(); }
  // A new state past the limit makes finish() fail; callers check this to stop early.
  bool over_limit(const GrammarLimits& limits) const { return states_.size() > limits.max_states; }

  // The grammar whose document is the rule starting at `root`.
  Result<Grammar> finish(StateId root, const GrammarLimits& limits = {}) const;

 private:
  struct Building {
    std::vector<ByteEdge> bytes;
    std::vector<StateId> epsilons;
    std::vector<CallEdge> calls;
    bool accept = false;
    int32_t plain_budget = 0;
  };
  std::vector<Building> states_;
};

}  // namespace llamaserve::grammar
