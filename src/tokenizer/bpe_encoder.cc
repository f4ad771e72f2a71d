// Byte-level BPE ("gpt2" vocabularies): pre-tokenize, map each byte of a piece to its GPT-2
// alphabet token, then apply the ranked merges, lowest rank first (ties: leftmost). A
// binary heap of candidate pairs over a linked list of symbols keeps a piece of n bytes at
// O(n log n), so a long run without pre-tokenizer breaks cannot go quadratic.
#include <algorithm>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace llamaserve {
namespace {

bool is_printable_byte(uint32_t b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct ByteAlphabet {
  std::array<uint32_t, 256> to_codepoint{};
  std::array<int16_t, 68> shifted_to_byte{};  // code point 256 + i -> byte

  ByteAlphabet() {
    uint32_t shifted = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      if (is_printable_byte(b)) {
        to_codepoint[b] = b;
      } else {
        shifted_to_byte[shifted] = static_cast<int16_t>(b);
        to_codepoint[b] = 256 + shifted++;
      }
    }
  }
};

const ByteAlphabet& byte_alphabet() {
  static const ByteAlphabet alphabet;
  return alphabet;
}

struct BpeSymbol {
  int32_t id = -1;  // -1 once merged into the left neighbour
  int32_t prev = -1;
  int32_t next = -1;
};

struct BpeCandidate {
  int32_t rank = 0;
  int32_t pos = 0;  // index of the left symbol
  int32_t left_id = 0;
  int32_t right_id = 0;
};

// std::push_heap keeps the largest on top, so "larger" here means "merges later".
bool merges_later(const BpeCandidate& a, const BpeCandidate& b) {
  return a.rank > b.rank || (a.rank == b.rank && a.pos > b.pos);
}

// Scratch buffers reused across the pieces of one encode call.
struct BpeScratch {
  std::vector<BpeSymbol> symbols;
  std::vector<BpeCandidate> heap;
  std::string mapped;
};

void encode_piece(const TokenizerImpl& impl, std::string_view piece, BpeScratch& scratch,
                  std::vector<int32_t>& out) {
  if (impl.ignore_merges) {
    scratch.mapped.clear();
    for (char c : piece) scratch.mapped += impl.byte_alphabet[static_cast<uint8_t>(c)];
    const auto it = impl.piece_to_id.find(scratch.mapped);
    if (it != impl.piece_to_id.end() && !(impl.types[it->second] == TokenType::kControl ||
                                          impl.types[it->second] == TokenType::kUnknown)) {
      out.push_back(it->second);
      return;
    }
  }

  // Bytes whose alphabet token is missing become the unknown token when there is one, as the
  // reference BPE does, and are dropped otherwise. They are also dropped when the unknown
  // token is a control token (SmolLM2's is <|endoftext|>): user text must never turn into a
  // control token.
  std::vector<BpeSymbol>& symbols = scratch.symbols;
  symbols.clear();
  for (char c : piece) {
    int32_t id = impl.byte_tokens[static_cast<uint8_t>(c)];
    if (id < 0) {
      if (!impl.data.unk_id || impl.types[*impl.data.unk_id] == TokenType::kControl) continue;
      id = *impl.data.unk_id;
    }
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, -1});
    if (index > 0) symbols[index - 1].next = index;
  }
  if (symbols.empty()) return;

  std::vector<BpeCandidate>& heap = scratch.heap;
  heap.clear();
  const auto add_candidate = [&](int32_t pos) {
    if (pos < 0 || symbols[pos].next < 0) return;
    const BpeSymbol& left = symbols[pos];
    const BpeSymbol& right = symbols[left.next];
    const auto it = impl.merges.find(bpe_pair_key(left.id, right.id));
    if (it == impl.merges.end()) return;
    heap.push_back({it->second.rank, pos, left.id, right.id});
    std::push_heap(heap.begin(), heap.end(), merges_later);
  };
  for (int32_t pos = 0; pos + 1 < static_cast<int32_t>(symbols.size()); ++pos) add_candidate(pos);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), merges_later);
    const BpeCandidate top = heap.back();
    heap.pop_back();
    BpeSymbol& left = symbols[top.pos];
    // Stale when either side has changed since the candidate was queued.
    if (left.id != top.left_id || left.next < 0 || symbols[left.next].id != top.right_id) continue;
    const int32_t right_pos = left.next;
    BpeSymbol& right = symbols[right_pos];
    left.id = impl.merges.at(bpe_pair_key(top.left_id, top.right_id)).result;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    right.id = -1;
    add_candidate(left.prev);
    add_candidate(top.pos);
  }
  for (int32_t pos = 0; pos >= 0; pos = symbols[pos].next) out.push_back(symbols[pos].id);
}

}  // namespace

uint32_t gpt2_byte_to_codepoint(uint8_t byte) { return byte_alphabet().to_codepoint[byte]; }

int gpt2_codepoint_to_byte(uint32_t cp) {
  if (cp < 256) return is_printable_byte(cp) ? static_cast<int>(cp) : -1;
  if (cp - 256 < byte_alphabet().shifted_to_byte.size())
    return byte_alphabet().shifted_to_byte[cp - 256];
  return -1;
}

Status build_bpe_tables(TokenizerImpl& impl) {
  LS_ASSIGN_OR_RETURN(impl.pre, pre_tokenizer_from_name(impl.data.pre));
  impl.ignore_merges = impl.pre == PreTokenizerKind::kLlama3;

  for (int b = 0; b < 256; ++b) {
    std::string& text = impl.byte_alphabet[b];
    unicode::append_utf8(text, gpt2_byte_to_codepoint(static_cast<uint8_t>(b)));
    const auto it = impl.piece_to_id.find(text);
    impl.byte_tokens[b] = it == impl.piece_to_id.end() ? -1 : it->second;
  }

  // A merge naming a token the vocabulary lacks can never apply; it is skipped rather than
  // rejected, since such files exist and tokenize correctly without it.
  std::string merged;
  impl.merges.reserve(impl.data.merges.size());
  for (size_t rank = 0; rank < impl.data.merges.size(); ++rank) {
    const std::string_view merge = impl.data.merges[rank];
    const size_t space = merge.find(' ', 1);
    if (space == std::string_view::npos) {
      return make_error(StatusCode::kInvalidArgument,
                        "tokenizer.ggml.merges[{}] '{}' is not two tokens separated by a space",
                        rank, merge.substr(0, 64));
    }
    const std::string_view left = merge.substr(0, space);
    const std::string_view right = merge.substr(space + 1);
    merged.assign(left);
    merged.append(right);
    const auto left_it = impl.piece_to_id.find(left);
    const auto right_it = impl.piece_to_id.find(right);
    const auto merged_it = impl.piece_to_id.find(merged);
    if (left_it == impl.piece_to_id.end() || right_it == impl.piece_to_id.end() ||
        merged_it == impl.piece_to_id.end()) {
      continue;
    }
    impl.merges.emplace(bpe_pair_key(left_it->second, right_it->second),
                        BpeMerge{static_cast<int32_t>(rank), merged_it->second});
  }

  for (size_t id = 0; id < impl.data.tokens.size(); ++id) {
    const std::string& piece = impl.data.tokens[id];
    const TokenType type = impl.types[id];
    if (type == TokenType::kUserDefined || type == TokenType::kControl ||
        type == TokenType::kUnknown) {
      impl.decoded[id] = piece;  // added tokens are stored as plain text, not in the alphabet
      continue;
    }
    std::string& bytes = impl.decoded[id];
    for (size_t pos = 0; pos < piece.size();) {
      const unicode::Utf8Char ch = unicode::decode_utf8(piece, pos);
      const int byte = ch.valid ? gpt2_codepoint_to_byte(ch.cp) : -1;
      if (byte >= 0) {
        bytes.push_back(static_cast<char>(byte));
      } else {
        bytes.append(piece, pos, ch.length);  // not in the alphabet: keep as written
      }
      pos += ch.length;
    }
  }
  return Status::ok();
}

void TokenizerImpl::encode_bpe(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<std::string_view> pieces;
  pre_tokenize(pre, text, pieces);
  BpeScratch scratch;
  for (const std::string_view piece : pieces) encode_piece(*this, piece, scratch, out);
}

}  // namespace llamaserve
