// SentencePiece-style BPE ("llama" vocabularies), following SentencePiece's BPE encoder:
// the text is cut into characters, then the adjacent pair whose concatenation is a piece
// with the highest score is merged, repeatedly (ties: leftmost pair first). Remaining
// characters without a piece become <0xXX> byte pieces (byte fallback) or the unknown token.
#include <algorithm>
#include <queue>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace llamaserve {
namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581 '▁'

// A run of the normalized text; length 0 once merged into its left neighbour.
struct SpmSymbol {
  uint32_t start = 0;
  uint32_t length = 0;
  int32_t prev = -1;
  int32_t next = -1;
};

struct SpmPair {
  float score = 0;
  int32_t left = 0;
  int32_t right = 0;
  uint32_t length = 0;  // bytes of the merged piece, to detect stale entries
};

// Highest score on top; among equal scores, the leftmost pair.
struct SpmPairOrder {
  bool operator()(const SpmPair& a, const SpmPair& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

int parse_byte_piece(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  int value = 0;
  for (char c : piece.substr(3, 2)) {
    value <<= 4;
    if (c >= '0' && c <= '9') {
      value |= c - '0';
    } else if (c >= 'A' && c <= 'F') {
      value |= c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      value |= c - 'a' + 10;
    } else {
      return -1;
    }
  }
  return value;
}

std::string replace_space_marker(std::string_view piece) {
  std::string out;
  out.reserve(piece.size());
  size_t pos = 0;
  while (pos < piece.size()) {
    if (piece.substr(pos, kSpaceMarker.size()) == kSpaceMarker) {
      out.push_back(' ');
      pos += kSpaceMarker.size();
    } else {
      out.push_back(piece[pos++]);
    }
  }
  return out;
}

}  // namespace

Status build_spm_tables(TokenizerImpl& impl) {
  impl.byte_tokens.fill(-1);
  const auto n_vocab = static_cast<int32_t>(impl.data.tokens.size());
  for (int32_t id = 0; id < n_vocab; ++id) {
    const std::string& piece = impl.data.tokens[id];
    switch (impl.types[id]) {
      case TokenType::kUndefined:
      case TokenType::kNormal:
      case TokenType::kUserDefined:
      case TokenType::kUnused:
        impl.spm_pieces.emplace(piece, id);
        impl.spm_has_unused |= impl.types[id] == TokenType::kUnused;
        impl.decoded[id] = replace_space_marker(piece);
        break;
      case TokenType::kByte: {
        const int byte = parse_byte_piece(piece);
        if (byte < 0) {
          impl.decoded[id] = piece;
        } else {
          if (impl.byte_tokens[byte] < 0) impl.byte_tokens[byte] = id;
          impl.decoded[id] = std::string(1, static_cast<char>(byte));
        }
        break;
      }
      case TokenType::kControl:
      case TokenType::kUnknown: impl.decoded[id] = piece; break;
    }
  }
  return Status::ok();
}

void TokenizerImpl::encode_spm(std::string_view text, bool add_space_prefix,
                               std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::string normalized;
  normalized.reserve(text.size() + text.size() / 2 + kSpaceMarker.size());
  if (add_space_prefix) normalized += kSpaceMarker;
  for (char c : text) {
    if (c == ' ') {
      normalized += kSpaceMarker;
    } else {
      normalized.push_back(c);
    }
  }

  // One symbol per character; a byte that is not UTF-8 is a symbol of its own.
  std::vector<SpmSymbol> symbols;
  symbols.reserve(normalized.size());
  for (size_t pos = 0; pos < normalized.size();) {
    const uint32_t length = unicode::decode_utf8(normalized, pos).length;
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({static_cast<uint32_t>(pos), length, index - 1, -1});
    if (index > 0) symbols[index - 1].next = index;
    pos += length;
  }

  // SentencePiece splits a merged unused piece back into the two pieces it came from.
  std::unordered_map<std::string_view, std::pair<std::string_view, std::string_view>> unused_splits;
  const auto piece_of = [&](const SpmSymbol& s) {
    return std::string_view(normalized).substr(s.start, s.length);
  };

  std::priority_queue<SpmPair, std::vector<SpmPair>, SpmPairOrder> agenda;
  const auto try_pair = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const SpmSymbol& l = symbols[left];
    const SpmSymbol& r = symbols[right];
    const std::string_view merged =
        std::string_view(normalized).substr(l.start, l.length + r.length);
    const auto it = spm_pieces.find(merged);
    if (it == spm_pieces.end()) return;
    agenda.push({score(it->second), left, right, static_cast<uint32_t>(merged.size())});
    if (spm_has_unused && types[it->second] == TokenType::kUnused) {
      unused_splits[merged] = {piece_of(l), piece_of(r)};
    }
  };
  for (size_t i = 1; i < symbols.size(); ++i) {
    try_pair(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));
  }

  while (!agenda.empty()) {
    const SpmPair pair = agenda.top();
    agenda.pop();
    SpmSymbol& left = symbols[pair.left];
    SpmSymbol& right = symbols[pair.right];
    if (left.length == 0 || right.length == 0 || left.length + right.length != pair.length) {
      continue;  // one side was merged elsewhere since this pair was queued
    }
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = pair.left;
    try_pair(left.prev, pair.left);
    try_pair(pair.left, left.next);
  }

  const bool byte_fallback =
      std::any_of(byte_tokens.begin(), byte_tokens.end(), [](int32_t id) { return id >= 0; });
  bool previous_was_unknown = false;
  // Recursion depth is bounded by the piece length (each split shortens it).
  const auto emit = [&](auto&& self, std::string_view piece) -> void {
    const auto it = spm_pieces.find(piece);
    if (it != spm_pieces.end()) {
      const auto split = unused_splits.find(piece);
      if (types[it->second] == TokenType::kUnused && split != unused_splits.end()) {
        self(self, split->second.first);
        self(self, split->second.second);
        return;
      }
      out.push_back(it->second);
      previous_was_unknown = false;
      return;
    }
    if (byte_fallback) {
      for (char c : piece) {
        const int32_t id = byte_tokens[static_cast<uint8_t>(c)];
        if (id >= 0) {
          out.push_back(id);
        } else if (data.unk_id) {
          out.push_back(*data.unk_id);
        }
      }
      previous_was_unknown = false;
      return;
    }
    // Without byte pieces, a run of unknown characters becomes a single unknown token.
    if (data.unk_id && !previous_was_unknown) out.push_back(*data.unk_id);
    previous_was_unknown = true;
  };
  for (int32_t i = 0; i >= 0; i = symbols[i].next) emit(emit, piece_of(symbols[i]));
}

}  // namespace llamaserve
