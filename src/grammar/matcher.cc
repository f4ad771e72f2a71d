#include "grammar/matcher.h"

#include <algorithm>
#include <bit>
#include <limits>

namespace llamaserve::grammar {

size_t TokenMask::count() const {
  size_t n = 0;
  for (uint64_t w : words) n += static_cast<size_t>(std::popcount(w));
  return n;
}

void TokenMask::apply(std::span<float> logits) const {
  const float minus_inf = -std::numeric_limits<float>::infinity();
  const size_t n = logits.size();
  for (size_t i = static_cast<size_t>(n_tokens); i < n; ++i) logits[i] = minus_inf;
  for (size_t w = 0; w < words.size() && w * 64 < n; ++w) {
    uint64_t blocked = ~words[w];
    if (blocked == 0) continue;
    while (blocked != 0) {
      const size_t i = w * 64 + static_cast<size_t>(std::countr_zero(blocked));
      if (i >= n || i >= static_cast<size_t>(n_tokens)) break;
      logits[i] = minus_inf;
      blocked &= blocked - 1;
    }
  }
}

Matcher::Matcher(const Grammar& grammar) : grammar_(&grammar) {
  enter(grammar.root(), -1, tops_, 0);
}

int32_t Matcher::push_frame(int32_t parent, StateId resume) {
  const uint64_t key =
      (static_cast<uint64_t>(static_cast<uint32_t>(parent)) << 32) | static_cast<uint32_t>(resume);
  auto [it, inserted] = frame_ids_.try_emplace(key, static_cast<int32_t>(frames_.size()));
  if (inserted) {
    const int32_t depth = parent < 0 ? 1 : frames_[static_cast<size_t>(parent)].depth + 1;
    frames_.push_back({parent, resume, depth});
  }
  return it->second;
}

void Matcher::add_top(std::vector<Top>& out, Top top) {
  if (std::find(out.begin(), out.end(), top) == out.end()) out.push_back(top);
}

void Matcher::enter(StateId state, int32_t frame, std::vector<Top>& out, int guard) {
  const Grammar::State& s = grammar_->state(state);
  if (s.simple) {
    add_top(out, {state, frame});
    return;
  }
  // A rule that can call itself without reading a byte would recurse forever; the guard
  // drops such paths (the compiler never builds them, but a schema's $ref cycle could).
  if (guard > 2 * kMaxStackDepth) return;
  for (StateId consuming : grammar_->consuming_closure(s)) add_top(out, {consuming, frame});
  const int32_t depth = frame < 0 ? 0 : frames_[static_cast<size_t>(frame)].depth;
  for (const CallEdge& call : grammar_->calls_closure(s)) {
    if (depth + 1 > kMaxStackDepth) continue;
    enter(call.callee, push_frame(frame, call.resume), out, guard + 1);
  }
  if (s.returns) {
    if (frame < 0) {
      add_top(out, {kCompleteState, -1});
    } else {
      const Frame f = frames_[static_cast<size_t>(frame)];
      enter(f.resume, f.parent, out, guard + 1);
    }
  }
}

void Matcher::step(std::span<const Top> in, uint8_t byte, std::vector<Top>& out) {
  out.clear();
  for (const Top& top : in) {
    if (top.state == kCompleteState) continue;
    for (const ByteEdge& edge : grammar_->byte_edges(grammar_->state(top.state))) {
      if (byte < edge.lo) break;  // sorted by lo
      if (byte <= edge.hi) enter(edge.target, top.frame, out, 0);
    }
  }
}

bool Matcher::advance(std::string_view bytes) {
  for (char c : bytes) {
    if (tops_.empty()) return false;
    step(tops_, static_cast<uint8_t>(c), scratch_);
    tops_.swap(scratch_);
  }
  return !tops_.empty();
}

bool Matcher::is_complete() const {
  return std::find(tops_.begin(), tops_.end(), Top{kCompleteState, -1}) != tops_.end();
}

bool Matcher::must_end() const { return tops_.size() == 1 && is_complete(); }

std::string Matcher::state_key() const {
  std::vector<std::vector<int32_t>> parts;
  parts.reserve(tops_.size());
  for (const Top& top : tops_) {
    std::vector<int32_t> part = {top.state};
    for (int32_t f = top.frame; f >= 0; f = frames_[static_cast<size_t>(f)].parent) {
      part.push_back(frames_[static_cast<size_t>(f)].resume);
    }
    parts.push_back(std::move(part));
  }
  std::sort(parts.begin(), parts.end());
  std::string key;
  for (const auto& part : parts) {
    const auto size = static_cast<int32_t>(part.size());
    key.append(reinterpret_cast<const char*>(&size), sizeof(size));
    key.append(reinterpret_cast<const char*>(part.data()), part.size() * sizeof(int32_t));
  }
  return key;
}

void Matcher::allowed_tokens(const TokenVocabulary& vocab, TokenMask& mask) {
  mask.reset(vocab.n_vocab());
  const bool complete = is_complete();
  if (complete) {
    for (int32_t id : vocab.end_tokens()) mask.allow(id);
  }
  const std::vector<TokenVocabulary::Node>& nodes = vocab.nodes();
  const std::vector<int32_t>& sorted = vocab.sorted_tokens();
  const std::vector<uint16_t>& chars = vocab.sorted_chars();
  if (levels_.size() < vocab.max_token_bytes() + 1) levels_.resize(vocab.max_token_bytes() + 1);
  levels_[0] = tops_;
  size_t n_allowed = 0;
  size_t visited = 0;
  const auto n_nodes = static_cast<int32_t>(nodes.size());
  for (int32_t i = 1; i < n_nodes;) {
    const TokenVocabulary::Node& node = nodes[static_cast<size_t>(i)];
    std::vector<Top>& here = levels_[node.depth];
    ++visited;
    step(levels_[node.depth - 1u], node.byte, here);
    if (here.empty()) {
      i = node.subtree_end;
      continue;
    }
    const int32_t budget =
        here.size() == 1 && here[0].state >= 0 ? grammar_->state(here[0].state).plain_budget : 0;
    if (node.plain_rest && budget > 0) {
      // Plain text from here on, under a state that takes `budget` more characters of it:
      // no need to step the grammar, only to count characters (bytes that do not continue
      // a UTF-8 sequence).
      const bool all_fit = budget >= node.max_rest_chars;
      for (int32_t t = node.token_begin; t < node.token_end; ++t) {
        const int32_t token = sorted[static_cast<size_t>(t)];
        if (!all_fit && chars[static_cast<size_t>(t)] - node.prefix_chars > budget) continue;
        mask.allow(token);
        ++n_allowed;
      }
      i = node.subtree_end;
      continue;
    }
    for (int32_t t = node.token_begin; t < node.token_begin + node.n_exact; ++t) {
      mask.allow(sorted[static_cast<size_t>(t)]);
    }
    n_allowed += static_cast<size_t>(node.n_exact);
    ++i;
  }
  last_nodes_visited_ = visited;
  if (n_allowed == 0 && !complete && !tops_.empty()) {
    for (int32_t id : vocab.end_tokens()) mask.allow(id);
  }
}

}  // namespace llamaserve::grammar
