#include "grammar/token_vocabulary.h"

#include <algorithm>
#include <numeric>

#include "grammar/grammar.h"

namespace llamaserve::grammar {
namespace {

// chars[d]: bytes[d..] is a sequence of plain characters, the last possibly unfinished, of
// that many characters; -1 when it is not.
void plain_suffixes(const std::string& bytes, std::vector<int32_t>& chars) {
  const size_t n = bytes.size();
  chars.assign(n + 1, -1);
  chars[n] = 0;
  for (size_t d = n; d-- > 0;) {
    const auto lead = static_cast<uint8_t>(bytes[d]);
    const int extra = utf8_continuations(lead);
    if (extra < 0 || (extra == 0 && !is_plain_ascii(lead))) continue;
    size_t k = 1;
    while (k <= static_cast<size_t>(extra) && d + k < n) {
      const auto cont = static_cast<uint8_t>(bytes[d + k]);
      if (cont < 0x80 || cont > 0xBF) break;
      ++k;
    }
    if (d + k == n) {
      chars[d] = 1;  // unfinished (or just finished) at the end of the token
    } else if (k == static_cast<size_t>(extra) + 1 && chars[d + k] >= 0) {
      chars[d] = chars[d + k] + 1;
    }
  }
}

}  // namespace

TokenVocabulary TokenVocabulary::from_tokenizer(const Tokenizer& tokenizer) {
  TokenVocabulary vocab;
  const int32_t n = tokenizer.n_vocab();
  vocab.bytes_.resize(static_cast<size_t>(n));
  for (int32_t id = 0; id < n; ++id) {
    if (tokenizer.is_end_of_generation(id)) {
      vocab.end_tokens_.push_back(id);
      continue;
    }
    vocab.bytes_[static_cast<size_t>(id)] = tokenizer.token_bytes(id, /*render_special=*/false);
  }
  vocab.build();
  return vocab;
}

TokenVocabulary TokenVocabulary::from_pieces(std::vector<std::string> pieces,
                                             std::vector<int32_t> end_tokens) {
  TokenVocabulary vocab;
  vocab.bytes_ = std::move(pieces);
  vocab.end_tokens_ = std::move(end_tokens);
  for (int32_t id : vocab.end_tokens_) vocab.bytes_[static_cast<size_t>(id)].clear();
  vocab.build();
  return vocab;
}

bool TokenVocabulary::is_end_token(int32_t id) const {
  return std::binary_search(end_tokens_.begin(), end_tokens_.end(), id);
}

void TokenVocabulary::build() {
  std::sort(end_tokens_.begin(), end_tokens_.end());
  for (size_t id = 0; id < bytes_.size(); ++id) {
    if (!bytes_[id].empty()) sorted_tokens_.push_back(static_cast<int32_t>(id));
    max_token_bytes_ = std::max(max_token_bytes_, bytes_[id].size());
  }
  std::stable_sort(sorted_tokens_.begin(), sorted_tokens_.end(), [&](int32_t a, int32_t b) {
    return bytes_[static_cast<size_t>(a)] < bytes_[static_cast<size_t>(b)];
  });

  nodes_.clear();
  nodes_.push_back(Node{});
  std::vector<int32_t> path = {0};  // path[d]: the open node at depth d
  const std::string* previous = nullptr;
  std::vector<int32_t> plain;
  auto close_to_depth = [&](size_t depth, int32_t token_index) {
    while (path.size() > depth + 1) {
      Node& node = nodes_[static_cast<size_t>(path.back())];
      node.subtree_end = static_cast<int32_t>(nodes_.size());
      node.token_end = token_index;
      path.pop_back();
    }
  };
  for (size_t index = 0; index < sorted_tokens_.size(); ++index) {
    const std::string& bytes = bytes_[static_cast<size_t>(sorted_tokens_[index])];
    size_t common = 0;
    if (previous != nullptr) {
      const size_t limit = std::min(previous->size(), bytes.size());
      while (common < limit && (*previous)[common] == bytes[common]) ++common;
    }
    close_to_depth(common, static_cast<int32_t>(index));
    uint16_t chars = 0;
    for (char c : bytes)
      chars = static_cast<uint16_t>(chars + ((static_cast<uint8_t>(c) & 0xC0) != 0x80));
    sorted_chars_.push_back(chars);
    for (size_t d = common; d < bytes.size(); ++d) {
      Node node;
      node.depth = static_cast<uint16_t>(d + 1);
      node.byte = static_cast<uint8_t>(bytes[d]);
      const Node& parent = nodes_[static_cast<size_t>(path.back())];
      node.prefix_chars = static_cast<uint16_t>(parent.prefix_chars + ((node.byte & 0xC0) != 0x80));
      node.token_begin = static_cast<int32_t>(index);
      path.push_back(static_cast<int32_t>(nodes_.size()));
      nodes_.push_back(node);
    }
    ++nodes_[static_cast<size_t>(path.back())].n_exact;
    plain_suffixes(bytes, plain);
    for (size_t d = 1; d < path.size(); ++d) {
      Node& node = nodes_[static_cast<size_t>(path[d])];
      node.plain_rest = node.plain_rest && plain[d] >= 0;
      if (plain[d] > 0) {
        node.max_rest_chars = static_cast<uint16_t>(
            std::max<int32_t>(node.max_rest_chars, std::min<int32_t>(plain[d], 65535)));
      }
    }
    previous = &bytes;
  }
  close_to_depth(0, static_cast<int32_t>(sorted_tokens_.size()));
  nodes_[0].subtree_end = static_cast<int32_t>(nodes_.size());
  nodes_[0].token_end = static_cast<int32_t>(sorted_tokens_.size());
  nodes_[0].plain_rest = false;
}

}  // namespace llamaserve::grammar
