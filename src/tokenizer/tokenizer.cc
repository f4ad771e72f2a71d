#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstring>

#include "tokenizer/tokenizer_impl.h"

namespace llamaserve {
namespace {

// Texts of control tokens that end a turn in the model families we serve.
constexpr std::string_view kEndOfGenerationTexts[] = {
    "<|eot_id|>",    "<|eom_id|>", "<|im_end|>",    "<|end_of_text|>",
    "<|endoftext|>", "<|end|>",    "<end_of_turn>", "</s>",
};

bool is_markup(TokenType type) {
  return type == TokenType::kControl || type == TokenType::kUnknown;
}

struct Fragment {
  std::string_view text;  // when token < 0
  int32_t token = -1;
};

// Cuts text at special tokens: leftmost match first, the longest token at a position. No
// match starts inside or reaches into a range of `plain`.
std::vector<Fragment> split_special(const TokenizerImpl& impl, std::string_view text,
                                    bool parse_special, std::span<const TextRange> plain) {
  std::vector<Fragment> fragments;
  size_t text_start = 0;
  size_t pos = 0;
  size_t next_plain = 0;  // first range of `plain` that does not end before pos
  while (pos < text.size()) {
    while (next_plain < plain.size() &&
           (plain[next_plain].end <= pos || plain[next_plain].end <= plain[next_plain].begin)) {
      ++next_plain;  // behind us, or empty
    }
    if (next_plain < plain.size() && plain[next_plain].begin <= pos) {
      pos = plain[next_plain].end;
      continue;
    }
    const size_t limit =
        next_plain < plain.size() ? std::min(plain[next_plain].begin, text.size()) : text.size();
    const auto first = static_cast<uint8_t>(text[pos]);
    int32_t match = -1;
    if (impl.special_first_byte[first]) {
      for (const int32_t id : impl.specials_by_first_byte[first]) {
        if (!parse_special && impl.types[id] != TokenType::kUserDefined) continue;
        const std::string& piece = impl.data.tokens[id];
        if (limit - pos >= piece.size() &&
            std::memcmp(text.data() + pos, piece.data(), piece.size()) == 0) {
          match = id;
          break;
        }
      }
    }
    if (match < 0) {
      ++pos;
      continue;
    }
    if (pos > text_start) fragments.push_back({text.substr(text_start, pos - text_start)});
    fragments.push_back({{}, match});
    pos += impl.data.tokens[match].size();
    text_start = pos;
  }
  if (text_start < text.size()) fragments.push_back({text.substr(text_start)});
  return fragments;
}

std::vector<int32_t> encode_fragments(const TokenizerImpl& impl,
                                      const std::vector<Fragment>& fragments, size_t text_size,
                                      bool add_special) {
  std::vector<int32_t> out;
  out.reserve(text_size / 3 + 2);
  if (add_special && impl.data.add_bos) out.push_back(*impl.data.bos_id);
  bool after_special = true;  // text at the start gets the space prefix, like text after a special
  for (const Fragment& fragment : fragments) {
    if (fragment.token >= 0) {
      out.push_back(fragment.token);
      after_special = true;
      continue;
    }
    if (impl.spm) {
      impl.encode_spm(fragment.text, impl.data.add_space_prefix && after_special, out);
    } else {
      impl.encode_bpe(fragment.text, out);
    }
    after_special = false;
  }
  if (add_special && impl.data.add_eos) out.push_back(*impl.data.eos_id);
  return out;
}

}  // namespace

Result<Tokenizer> Tokenizer::create(TokenizerData data) {
  LS_RETURN_IF_ERROR(validate_tokenizer_data(data));
  auto impl = std::make_shared<TokenizerImpl>();
  impl->data = std::move(data);
  const TokenizerData& d = impl->data;
  const auto n_vocab = static_cast<int32_t>(d.tokens.size());
  impl->spm = d.model == "llama";
  impl->types = d.token_types;
  impl->types.resize(d.tokens.size(), TokenType::kNormal);
  impl->decoded.resize(d.tokens.size());
  impl->piece_to_id.reserve(d.tokens.size());
  for (int32_t id = 0; id < n_vocab; ++id) impl->piece_to_id.emplace(d.tokens[id], id);

  LS_RETURN_IF_ERROR(impl->spm ? build_spm_tables(*impl) : build_bpe_tables(*impl));

  for (int32_t id = 0; id < n_vocab; ++id) {
    const TokenType type = impl->types[id];
    const std::string& piece = d.tokens[id];
    if (piece.empty() || !(type == TokenType::kUserDefined || is_markup(type))) continue;
    const auto first = static_cast<uint8_t>(piece[0]);
    impl->specials_by_first_byte[first].push_back(id);
    impl->special_first_byte[first] = true;
  }
  for (auto& ids : impl->specials_by_first_byte) {
    std::stable_sort(ids.begin(), ids.end(),
                     [&](int32_t a, int32_t b) { return d.tokens[a].size() > d.tokens[b].size(); });
  }

  impl->end_of_generation.assign(d.tokens.size(), false);
  for (const auto& id : {d.eos_id, d.eot_id}) {
    if (id) impl->end_of_generation[*id] = true;
  }
  for (const std::string_view text : kEndOfGenerationTexts) {
    const auto it = impl->piece_to_id.find(text);
    if (it != impl->piece_to_id.end() && impl->types[it->second] != TokenType::kNormal) {
      impl->end_of_generation[it->second] = true;
    }
  }
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  return encode_fragments(*impl_, split_special(*impl_, text, parse_special, {}), text.size(),
                          add_special);
}

std::vector<int32_t> Tokenizer::encode_guarded(std::string_view text, bool add_special,
                                               std::span<const TextRange> plain_ranges) const {
  return encode_fragments(*impl_, split_special(*impl_, text, true, plain_ranges), text.size(),
                          add_special);
}

std::string_view Tokenizer::token_piece(int32_t id) const {
  if (id < 0 || id >= n_vocab()) return {};
  return impl_->data.tokens[id];
}

std::string Tokenizer::token_bytes(int32_t id, bool render_special) const {
  if (id < 0 || id >= n_vocab()) return {};
  if (is_markup(impl_->types[id]) && !render_special) return {};
  return impl_->decoded[id];
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  const TokenizerImpl& impl = *impl_;
  std::string out;
  bool strip_space = impl.spm && impl.data.add_space_prefix;
  for (const int32_t id : ids) {
    if (id < 0 || id >= n_vocab()) continue;
    if (is_markup(impl.types[id]) && skip_special) continue;
    std::string_view bytes = impl.decoded[id];
    // SentencePiece drops the space of the dummy prefix from the first piece with output.
    if (strip_space && !bytes.empty() && !is_markup(impl.types[id])) {
      if (bytes.front() == ' ') bytes.remove_prefix(1);
      strip_space = false;
    }
    out.append(bytes);
  }
  return out;
}

int32_t Tokenizer::n_vocab() const { return static_cast<int32_t>(impl_->data.tokens.size()); }
std::optional<int32_t> Tokenizer::bos_id() const { return impl_->data.bos_id; }
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->data.eos_id; }
std::optional<int32_t> Tokenizer::eot_id() const { return impl_->data.eot_id; }
bool Tokenizer::add_bos() const { return impl_->data.add_bos; }
const TokenizerData& Tokenizer::data() const { return impl_->data; }

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < n_vocab() && is_markup(impl_->types[id]);
}

TokenType Tokenizer::token_type(int32_t id) const {
  return id >= 0 && id < n_vocab() ? impl_->types[id] : TokenType::kUndefined;
}

bool Tokenizer::is_end_of_generation(int32_t id) const {
  return id >= 0 && id < n_vocab() && impl_->end_of_generation[id];
}

std::optional<int32_t> Tokenizer::find_token(std::string_view piece) const {
  const auto it = impl_->piece_to_id.find(piece);
  if (it == impl_->piece_to_id.end()) return std::nullopt;
  return it->second;
}

}  // namespace llamaserve
