#include "grammar/regex.h"

#include <bitset>
#include <memory>
#include <vector>

namespace llamaserve::grammar {
namespace {

constexpr int kMaxRepeat = 1000;
constexpr int kMaxRegexDepth = 64;

struct Node {
  enum class Kind { kEmpty, kChars, kSequence, kAlternatives, kRepeat } kind = Kind::kEmpty;
  std::bitset<128> ascii;      // kChars: the ASCII characters
  bool any_non_ascii = false;  // kChars: also every non-ASCII character
  std::string utf8;            // kChars: one literal non-ASCII character instead
  std::vector<std::unique_ptr<Node>> children;
  int min = 0;
  int max = 0;  // -1: unbounded
};

using NodePtr = std::unique_ptr<Node>;

NodePtr make(Node::Kind kind) {
  auto node = std::make_unique<Node>();
  node->kind = kind;
  return node;
}

std::bitset<128> class_digits() {
  std::bitset<128> set;
  for (int c = '0'; c <= '9'; ++c) set.set(static_cast<size_t>(c));
  return set;
}
std::bitset<128> class_word() {
  std::bitset<128> set = class_digits();
  for (int c = 'a'; c <= 'z'; ++c) set.set(static_cast<size_t>(c));
  for (int c = 'A'; c <= 'Z'; ++c) set.set(static_cast<size_t>(c));
  set.set('_');
  return set;
}
std::bitset<128> class_space() {
  std::bitset<128> set;
  for (char c : {' ', '\t', '\n', '\r', '\v', '\f'}) set.set(static_cast<size_t>(c));
  return set;
}

class Parser {
 public:
  explicit Parser(std::string_view pattern) : p_(pattern) {}

  Result<NodePtr> parse(bool& anchored_start, bool& anchored_end) {
    anchored_start = !p_.empty() && p_[0] == '^';
    if (anchored_start) ++i_;
    LS_ASSIGN_OR_RETURN(NodePtr node, alternatives(0));
    if (i_ < p_.size() && p_[i_] == '$') {
      anchored_end = true;
      ++i_;
    }
    if (i_ != p_.size()) return error(fmt::format("unexpected '{}'", p_[i_]));
    return node;
  }

 private:
  Status error(std::string what) const {
    return make_error(StatusCode::kUnsupported, "pattern \"{}\": {} at offset {}", p_, what, i_);
  }

  bool at_end_of_alternative() const {
    if (i_ >= p_.size()) return true;
    const char c = p_[i_];
    return c == '|' || c == ')' || (c == '$' && i_ + 1 == p_.size());
  }

  Result<NodePtr> alternatives(int depth) {
    if (depth > kMaxRegexDepth) return error("groups nested too deeply");
    auto alt = make(Node::Kind::kAlternatives);
    while (true) {
      auto seq = make(Node::Kind::kSequence);
      while (!at_end_of_alternative()) {
        LS_ASSIGN_OR_RETURN(NodePtr atom, this->atom(depth));
        LS_ASSIGN_OR_RETURN(NodePtr repeated, quantified(std::move(atom)));
        seq->children.push_back(std::move(repeated));
      }
      alt->children.push_back(std::move(seq));
      if (i_ < p_.size() && p_[i_] == '|') {
        ++i_;
        continue;
      }
      return alt;
    }
  }

  Result<int> number() {
    const size_t start = i_;
    int value = 0;
    while (i_ < p_.size() && p_[i_] >= '0' && p_[i_] <= '9') {
      value = value * 10 + (p_[i_] - '0');
      if (value > kMaxRepeat) return error(fmt::format("repetition count above {}", kMaxRepeat));
      ++i_;
    }
    if (i_ == start) return error("expected a repetition count");
    return value;
  }

  Result<NodePtr> quantified(NodePtr atom) {
    if (i_ >= p_.size()) return atom;
    int min = 0;
    int max = 0;
    const char c = p_[i_];
    if (c == '*') {
      min = 0, max = -1, ++i_;
    } else if (c == '+') {
      min = 1, max = -1, ++i_;
    } else if (c == '?') {
      min = 0, max = 1, ++i_;
    } else if (c == '{') {
      ++i_;
      LS_ASSIGN_OR_RETURN(min, number());
      max = min;
      if (i_ < p_.size() && p_[i_] == ',') {
        ++i_;
        if (i_ < p_.size() && p_[i_] == '}') {
          max = -1;
        } else {
          LS_ASSIGN_OR_RETURN(max, number());
        }
      }
      if (i_ >= p_.size() || p_[i_] != '}') return error("unterminated {n,m}");
      ++i_;
      if (max >= 0 && max < min) return error("{n,m} with m < n");
    } else {
      return atom;
    }
    if (i_ < p_.size() && p_[i_] == '?') ++i_;  // lazy: the same strings
    if (i_ < p_.size() && (p_[i_] == '*' || p_[i_] == '+' || p_[i_] == '?' || p_[i_] == '{')) {
      return error("a quantifier after a quantifier");
    }
    auto node = make(Node::Kind::kRepeat);
    node->min = min;
    node->max = max;
    node->children.push_back(std::move(atom));
    return node;
  }

  static NodePtr chars(std::bitset<128> set, bool non_ascii) {
    auto node = make(Node::Kind::kChars);
    node->ascii = set;
    node->any_non_ascii = non_ascii;
    return node;
  }

  Result<int> hex(int digits) {
    int value = 0;
    for (int k = 0; k < digits; ++k) {
      if (i_ >= p_.size() || !std::isxdigit(static_cast<unsigned char>(p_[i_]))) {
        return error("bad hexadecimal escape");
      }
      const char c = p_[i_++];
      value = value * 16 + (c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return value;
  }

  // An escape after '\' (i_ at the escaped character): a class into `set`/`non_ascii`.
  Status escape(std::bitset<128>& set, bool& non_ascii, bool in_class) {
    if (i_ >= p_.size()) return error("a pattern ending in '\\'");
    const char c = p_[i_++];
    switch (c) {
      case 'd': set |= class_digits(); return Status::ok();
      case 'w': set |= class_word(); return Status::ok();
      case 's': set |= class_space(); return Status::ok();
      case 'D':
        set |= ~class_digits();
        non_ascii = true;
        return Status::ok();
      case 'W':
        set |= ~class_word();
        non_ascii = true;
        return Status::ok();
      case 'S':
        set |= ~class_space();
        non_ascii = true;
        return Status::ok();
      case 'n': set.set('\n'); return Status::ok();
      case 'r': set.set('\r'); return Status::ok();
      case 't': set.set('\t'); return Status::ok();
      case 'f': set.set('\f'); return Status::ok();
      case 'v': set.set('\v'); return Status::ok();
      case 'x':
      case 'u': {
        LS_ASSIGN_OR_RETURN(int code, hex(c == 'x' ? 2 : 4));
        if (code >= 128) return error("\\x/\\u escapes beyond ASCII are not supported");
        set.set(static_cast<size_t>(code));
        return Status::ok();
      }
      case 'b':
        if (in_class) {
          set.set('\b');
          return Status::ok();
        }
        return error("word boundaries (\\b) are not supported");
      case 'B': return error("\\B is not supported");
      case 'p':
      case 'P': return error("Unicode property escapes (\\p{...}) are not supported");
      default: break;
    }
    if (c >= '1' && c <= '9') return error("backreferences are not supported");
    if (static_cast<unsigned char>(c) >= 128 || std::isalnum(static_cast<unsigned char>(c))) {
      return error(fmt::format("unknown escape \\{}", c));
    }
    set.set(static_cast<size_t>(c));
    return Status::ok();
  }

  Result<NodePtr> char_class() {
    // i_ after '['
    bool negated = false;
    if (i_ < p_.size() && p_[i_] == '^') {
      negated = true;
      ++i_;
    }
    std::bitset<128> set;
    bool non_ascii = false;
    bool first = true;
    while (true) {
      if (i_ >= p_.size()) return error("unterminated character class");
      char c = p_[i_];
      if (c == ']' && !first) {
        ++i_;
        break;
      }
      first = false;
      int lo;
      if (static_cast<unsigned char>(c) >= 128) {
        return error("non-ASCII characters in a class are not supported");
      }
      if (c == '\\') {
        ++i_;
        std::bitset<128> escaped;
        bool escaped_non_ascii = false;
        LS_RETURN_IF_ERROR(escape(escaped, escaped_non_ascii, /*in_class=*/true));
        if (escaped.count() != 1 || escaped_non_ascii) {  // a class escape: no range
          set |= escaped;
          non_ascii = non_ascii || escaped_non_ascii;
          continue;
        }
        lo = static_cast<int>(escaped._Find_first());
      } else {
        lo = c;
        ++i_;
      }
      if (i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
        ++i_;
        int hi;
        if (p_[i_] == '\\') {
          ++i_;
          std::bitset<128> escaped;
          bool escaped_non_ascii = false;
          LS_RETURN_IF_ERROR(escape(escaped, escaped_non_ascii, true));
          if (escaped.count() != 1 || escaped_non_ascii) return error("a range ending in a class");
          hi = static_cast<int>(escaped._Find_first());
        } else {
          if (static_cast<unsigned char>(p_[i_]) >= 128) {
            return error("non-ASCII characters in a class are not supported");
          }
          hi = p_[i_++];
        }
        if (hi < lo) return error("a class range out of order");
        for (int k = lo; k <= hi; ++k) set.set(static_cast<size_t>(k));
      } else {
        set.set(static_cast<size_t>(lo));
      }
    }
    if (negated) return chars(~set, !non_ascii);
    return chars(set, non_ascii);
  }

  Result<NodePtr> atom(int depth) {
    const char c = p_[i_];
    switch (c) {
      case '(': {
        ++i_;
        if (i_ < p_.size() && p_[i_] == '?') {
          if (i_ + 1 < p_.size() && p_[i_ + 1] == ':') {
            i_ += 2;
          } else if (i_ + 1 < p_.size() && p_[i_ + 1] == '<' && i_ + 2 < p_.size() &&
                     p_[i_ + 2] != '=' && p_[i_ + 2] != '!') {
            const size_t close = p_.find('>', i_);
            if (close == std::string_view::npos) return error("unterminated group name");
            i_ = close + 1;
          } else {
            return error("lookaround and other (?...) groups are not supported");
          }
        }
        LS_ASSIGN_OR_RETURN(NodePtr inner, alternatives(depth + 1));
        if (i_ >= p_.size() || p_[i_] != ')') return error("unbalanced '('");
        ++i_;
        return inner;
      }
      case ')': return error("unbalanced ')'");
      case '[': ++i_; return char_class();
      case '.': {
        ++i_;
        std::bitset<128> set;
        set.set();
        set.reset('\n');
        set.reset('\r');
        return chars(set, true);
      }
      case '^': return error("'^' is supported only at the start of the pattern");
      case '$': return error("'$' is supported only at the end of the pattern");
      case '*':
      case '+':
      case '?':
      case '{': return error(fmt::format("nothing to repeat before '{}'", c));
      case '\\': {
        ++i_;
        std::bitset<128> set;
        bool non_ascii = false;
        LS_RETURN_IF_ERROR(escape(set, non_ascii, /*in_class=*/false));
        return chars(set, non_ascii);
      }
      default: break;
    }
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 128) {
      ++i_;
      std::bitset<128> set;
      set.set(byte);
      return chars(set, false);
    }
    const int extra = utf8_continuations(byte);
    if (extra <= 0 || i_ + 1 + static_cast<size_t>(extra) > p_.size()) {
      return error("invalid UTF-8 in the pattern");
    }
    auto node = make(Node::Kind::kChars);
    node->utf8 = std::string(p_.substr(i_, 1 + static_cast<size_t>(extra)));
    i_ += 1 + static_cast<size_t>(extra);
    return node;
  }

  std::string_view p_;
  size_t i_ = 0;
};

class Emitter {
 public:
  Emitter(GrammarBuilder& b, size_t max_states) : b_(b), max_states_(max_states) {}

  // Adds the paths of `node` from `from`; returns the state reached after it.
  Result<StateId> emit(const Node& node, StateId from) {
    if (b_.n_states() > max_states_) {
      return make_error(StatusCode::kOutOfRange,
                        "the pattern expands to more than {} automaton states", max_states_);
    }
    switch (node.kind) {
      case Node::Kind::kEmpty: return from;
      case Node::Kind::kChars: {
        const StateId to = b_.add_state();
        add_chars(node, from, to);
        return to;
      }
      case Node::Kind::kSequence: {
        StateId at = from;
        for (const NodePtr& child : node.children) {
          LS_ASSIGN_OR_RETURN(at, emit(*child, at));
        }
        return at;
      }
      case Node::Kind::kAlternatives: {
        if (node.children.size() == 1) return emit(*node.children[0], from);
        const StateId to = b_.add_state();
        for (const NodePtr& child : node.children) {
          const StateId start = b_.add_state();
          b_.add_epsilon(from, start);
          LS_ASSIGN_OR_RETURN(StateId end, emit(*child, start));
          b_.add_epsilon(end, to);
        }
        return to;
      }
      case Node::Kind::kRepeat: {
        const Node& body = *node.children[0];
        StateId at = from;
        for (int k = 0; k < node.min; ++k) {
          LS_ASSIGN_OR_RETURN(at, emit(body, at));
        }
        if (node.max < 0) {
          // at --e--> loop; loop --body--> back to loop; loop --e--> out
          const StateId loop = b_.add_state();
          b_.add_epsilon(at, loop);
          LS_ASSIGN_OR_RETURN(StateId end, emit(body, loop));
          b_.add_epsilon(end, loop);
          return loop;
        }
        const StateId to = b_.add_state();
        b_.add_epsilon(at, to);
        for (int k = node.min; k < node.max; ++k) {
          LS_ASSIGN_OR_RETURN(at, emit(body, at));
          b_.add_epsilon(at, to);
        }
        return to;
      }
    }
    return from;
  }

  // One character of free text (any ASCII that needs no escape, or any UTF-8 character)
  // from `from` to `to`, for the unanchored ends.
  void add_any_plain(StateId from, StateId to) {
    Node any;
    any.kind = Node::Kind::kChars;
    for (int c = 0x20; c < 0x80; ++c) {
      if (is_plain_ascii(static_cast<uint8_t>(c))) any.ascii.set(static_cast<size_t>(c));
    }
    any.any_non_ascii = true;
    add_chars(any, from, to);
  }

 private:
  void add_chars(const Node& node, StateId from, StateId to) {
    if (!node.utf8.empty()) {
      StateId at = from;
      for (size_t k = 0; k + 1 < node.utf8.size(); ++k) {
        const StateId next = b_.add_state();
        const auto byte = static_cast<uint8_t>(node.utf8[k]);
        b_.add_bytes(at, byte, byte, next);
        at = next;
      }
      const auto last = static_cast<uint8_t>(node.utf8.back());
      b_.add_bytes(at, last, last, to);
      return;
    }
    // Plain bytes as ranges.
    int c = 0;
    while (c < 128) {
      if (!node.ascii.test(static_cast<size_t>(c)) || !is_plain_ascii(static_cast<uint8_t>(c))) {
        ++c;
        continue;
      }
      int end = c;
      while (end + 1 < 128 && node.ascii.test(static_cast<size_t>(end + 1)) &&
             is_plain_ascii(static_cast<uint8_t>(end + 1))) {
        ++end;
      }
      b_.add_bytes(from, static_cast<uint8_t>(c), static_cast<uint8_t>(end), to);
      c = end + 1;
    }
    // Characters JSON escapes, in their escaped form.
    StateId backslash = kNoState;
    auto escaped = [&](char letter) {
      if (backslash == kNoState) {
        backslash = b_.add_state();
        b_.add_bytes(from, '\\', '\\', backslash);
      }
      const auto byte = static_cast<uint8_t>(letter);
      b_.add_bytes(backslash, byte, byte, to);
    };
    if (node.ascii.test('"')) escaped('"');
    if (node.ascii.test('\\')) escaped('\\');
    if (node.ascii.test('\n')) escaped('n');
    if (node.ascii.test('\r')) escaped('r');
    if (node.ascii.test('\t')) escaped('t');
    if (node.ascii.test('\f')) escaped('f');
    if (node.ascii.test('\b')) escaped('b');
    for (int k = 0; k < 0x20; ++k) {
      if (!node.ascii.test(static_cast<size_t>(k)) || k == '\n' || k == '\r' || k == '\t' ||
          k == '\f' || k == '\b') {
        continue;
      }
      if (backslash == kNoState) {
        backslash = b_.add_state();
        b_.add_bytes(from, '\\', '\\', backslash);
      }
      const std::string rest = fmt::format("u{:04x}", k);
      StateId at = b_.add_literal(backslash, std::string_view(rest).substr(0, rest.size() - 1));
      const auto last = static_cast<uint8_t>(rest.back());
      b_.add_bytes(at, last, last, to);
    }
    if (node.any_non_ascii) {
      b_.add_utf8_multibyte(from, to);
    }
  }

  GrammarBuilder& b_;
  size_t max_states_;
};

}  // namespace

Status add_pattern(GrammarBuilder& builder, std::string_view pattern, StateId from, StateId to,
                   size_t max_states) {
  bool anchored_start = false;
  bool anchored_end = false;
  Parser parser(pattern);
  LS_ASSIGN_OR_RETURN(NodePtr root, parser.parse(anchored_start, anchored_end));
  Emitter emitter(builder, max_states);
  StateId at = from;
  if (!anchored_start) {
    const StateId loop = builder.add_state();
    builder.add_epsilon(at, loop);
    emitter.add_any_plain(loop, loop);
    at = loop;
  }
  LS_ASSIGN_OR_RETURN(at, emitter.emit(*root, at));
  if (!anchored_end) {
    const StateId loop = builder.add_state();
    builder.add_epsilon(at, loop);
    emitter.add_any_plain(loop, loop);
    at = loop;
  }
  builder.add_epsilon(at, to);
  if (builder.n_states() > max_states) {
    return make_error(StatusCode::kOutOfRange,
                      "the pattern expands to more than {} automaton states", max_states);
  }
  return Status::ok();
}

}  // namespace llamaserve::grammar
