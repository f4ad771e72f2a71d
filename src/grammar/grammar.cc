#include "grammar/grammar.h"

#include <algorithm>

namespace llamaserve::grammar {

bool is_plain_ascii(uint8_t byte) {
  return byte >= 0x20 && byte < 0x80 && byte != '"' && byte != '\\';
}

int utf8_continuations(uint8_t lead) {
  if (lead < 0x80) return 0;
  if (lead >= 0xC2 && lead <= 0xDF) return 1;
  if (lead >= 0xE0 && lead <= 0xEF) return 2;
  if (lead >= 0xF0 && lead <= 0xF4) return 3;
  return -1;
}

StateId GrammarBuilder::add_state() {
  states_.emplace_back();
  return static_cast<StateId>(states_.size() - 1);
}

void GrammarBuilder::add_bytes(StateId from, uint8_t lo, uint8_t hi, StateId to) {
  states_[static_cast<size_t>(from)].bytes.push_back({lo, hi, to});
}

void GrammarBuilder::add_utf8_multibyte(StateId from, StateId to) {
  const StateId need1 = add_state();
  const StateId need2 = add_state();
  const StateId need3 = add_state();
  add_bytes(from, 0xC2, 0xDF, need1);
  add_bytes(from, 0xE0, 0xEF, need2);
  add_bytes(from, 0xF0, 0xF4, need3);
  add_bytes(need3, 0x80, 0xBF, need2);
  add_bytes(need2, 0x80, 0xBF, need1);
  add_bytes(need1, 0x80, 0xBF, to);
}

void GrammarBuilder::add_epsilon(StateId from, StateId to) {
  states_[static_cast<size_t>(from)].epsilons.push_back(to);
}

void GrammarBuilder::add_call(StateId from, StateId callee, StateId resume) {
  states_[static_cast<size_t>(from)].calls.push_back({callee, resume});
}

StateId GrammarBuilder::add_literal(StateId from, std::string_view text) {
  StateId at = from;
  for (char c : text) {
    const StateId next = add_state();
    const auto byte = static_cast<uint8_t>(c);
    add_bytes(at, byte, byte, next);
    at = next;
  }
  return at;
}

void GrammarBuilder::set_accept(StateId state) {
  states_[static_cast<size_t>(state)].accept = true;
}

void GrammarBuilder::set_plain_budget(StateId state, int32_t budget) {
  states_[static_cast<size_t>(state)].plain_budget = budget;
}

Result<Grammar> GrammarBuilder::finish(StateId root, const GrammarLimits& limits) const {
  if (states_.size() > limits.max_states) {
    return make_error(StatusCode::kOutOfRange,
                      "the schema needs an automaton of {} states; the limit is {}", states_.size(),
                      limits.max_states);
  }
  if (root < 0 || static_cast<size_t>(root) >= states_.size()) {
    return Status(StatusCode::kInternal, "grammar: root state out of range");
  }
  Grammar g;
  g.root_ = root;
  g.states_.resize(states_.size());
  std::vector<uint32_t> seen(states_.size(), 0);
  uint32_t stamp = 0;
  std::vector<StateId> stack;
  std::vector<StateId> closure;
  for (size_t id = 0; id < states_.size(); ++id) {
    Grammar::State& out = g.states_[id];
    std::vector<ByteEdge> edges = states_[id].bytes;
    std::sort(edges.begin(), edges.end(),
              [](const ByteEdge& a, const ByteEdge& b) { return a.lo < b.lo; });
    out.bytes_begin = static_cast<uint32_t>(g.byte_edges_.size());
    g.byte_edges_.insert(g.byte_edges_.end(), edges.begin(), edges.end());
    out.bytes_end = static_cast<uint32_t>(g.byte_edges_.size());
    out.plain_budget = states_[id].plain_budget;

    // Epsilon closure, the state itself first.
    ++stamp;
    closure.clear();
    stack.assign(1, static_cast<StateId>(id));
    seen[id] = stamp;
    while (!stack.empty()) {
      const StateId s = stack.back();
      stack.pop_back();
      closure.push_back(s);
      for (StateId next : states_[static_cast<size_t>(s)].epsilons) {
        if (seen[static_cast<size_t>(next)] != stamp) {
          seen[static_cast<size_t>(next)] = stamp;
          stack.push_back(next);
        }
      }
    }
    out.consuming_begin = static_cast<uint32_t>(g.closure_states_.size());
    out.calls_begin = static_cast<uint32_t>(g.closure_calls_.size());
    for (StateId s : closure) {
      const Building& b = states_[static_cast<size_t>(s)];
      if (!b.bytes.empty()) g.closure_states_.push_back(s);
      out.returns = out.returns || b.accept;
    }
    out.consuming_end = static_cast<uint32_t>(g.closure_states_.size());
    for (StateId s : closure) {
      const Building& b = states_[static_cast<size_t>(s)];
      g.closure_calls_.insert(g.closure_calls_.end(), b.calls.begin(), b.calls.end());
    }
    out.calls_end = static_cast<uint32_t>(g.closure_calls_.size());
    out.simple = !out.returns && out.calls_end == out.calls_begin &&
                 out.consuming_end - out.consuming_begin == 1 &&
                 g.closure_states_[out.consuming_begin] == static_cast<StateId>(id);
    if (g.closure_states_.size() + g.closure_calls_.size() > limits.max_closure_entries) {
      return make_error(StatusCode::kOutOfRange,
                        "the schema's automaton is too large (more than {} closure entries)",
                        limits.max_closure_entries);
    }
  }
  return g;
}

}  // namespace llamaserve::grammar
