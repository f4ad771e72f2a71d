#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdint>

#include "tokenizer/unicode.h"

namespace llamaserve {
namespace {

// The only distinctions the regexes make between code points.
enum CharClass : uint8_t { kLetter, kNumber, kSpace, kOther };

struct Codepoints {
  std::vector<uint32_t> cp;
  std::vector<uint8_t> cls;
  std::vector<uint32_t> offset;  // byte offset of each code point, then text.size()
};

constexpr uint32_t kInvalidByte = 0xFFFFFFFF;  // stands for a byte that is not UTF-8

void decode(std::string_view text, Codepoints& out) {
  out.cp.reserve(text.size());
  out.cls.reserve(text.size());
  out.offset.reserve(text.size() + 1);
  size_t pos = 0;
  while (pos < text.size()) {
    const unicode::Utf8Char ch = unicode::decode_utf8(text, pos);
    uint8_t cls = kOther;
    if (ch.valid) {
      const unicode::CodepointInfo info = unicode::codepoint_info(ch.cp);
      if (info.whitespace) {
        cls = kSpace;
      } else if (info.category == unicode::Category::kLetter) {
        cls = kLetter;
      } else if (info.category == unicode::Category::kNumber) {
        cls = kNumber;
      }
    }
    out.cp.push_back(ch.valid ? ch.cp : kInvalidByte);
    out.cls.push_back(cls);
    out.offset.push_back(static_cast<uint32_t>(pos));
    pos += ch.length;
  }
  out.offset.push_back(static_cast<uint32_t>(text.size()));
}

bool is_line_break(uint32_t cp) { return cp == '\r' || cp == '\n'; }

// A view of the code points [begin, end) of one fragment; `end` acts as the end of the string
// for look-ahead, as it does when a regex runs on each fragment of a previous split.
struct Span {
  const Codepoints& cps;
  size_t end;

  uint32_t cp(size_t i) const { return cps.cp[i]; }
  uint8_t cls(size_t i) const { return cps.cls[i]; }
  size_t run_end(size_t i, uint8_t cls) const {
    while (i < end && cps.cls[i] == cls) ++i;
    return i;
  }
};

// 's|'t|'re|'ve|'m|'ll|'d, optionally case-insensitive. Under Unicode case folding the only
// non-ASCII code point equal to one of these letters is U+017F (long s), which folds to 's'.
size_t match_contraction(const Span& s, size_t i, bool ignore_case) {
  if (s.cp(i) != '\'' || i + 1 >= s.end) return 0;
  const auto fold = [ignore_case](uint32_t c) -> uint32_t {
    if (!ignore_case) return c;
    if (c >= 'A' && c <= 'Z') return c + ('a' - 'A');
    return c == 0x17F ? 's' : c;
  };
  const uint32_t c1 = fold(s.cp(i + 1));
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (i + 2 >= s.end) return 0;
  const uint32_t c2 = fold(s.cp(i + 2));
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  return 0;
}

// \s+(?!\S)|\s+ at a whitespace code point: the whole run when it ends the fragment or is one
// code point long, otherwise all of it but the last code point (which the next word takes).
size_t match_whitespace(const Span& s, size_t i) {
  const size_t k = s.run_end(i, kSpace);
  if (k == s.end || k - i == 1) return k - i;
  return k - i - 1;
}

size_t match_gpt2(const Span& s, size_t i) {
  if (const size_t n = match_contraction(s, i, false)) return n;
  // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': the class of the code point after the
  // optional space picks the alternative.
  const size_t j = i + (s.cp(i) == ' ' ? 1 : 0);
  if (j < s.end && s.cls(j) != kSpace) return s.run_end(j, s.cls(j)) - i;
  return match_whitespace(s, i);
}

size_t match_llama3(const Span& s, size_t i, size_t max_digits) {
  if (const size_t n = match_contraction(s, i, true)) return n;
  const uint8_t cls = s.cls(i);
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (cls != kLetter && cls != kNumber && !is_line_break(s.cp(i)) && i + 1 < s.end &&
      s.cls(i + 1) == kLetter) {
    return s.run_end(i + 1, kLetter) - i;
  }
  if (cls == kLetter) return s.run_end(i, kLetter) - i;
  // \p{N}{1,3} (or \p{N})
  if (cls == kNumber) return std::min(s.run_end(i, kNumber) - i, max_digits);
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  const size_t j = i + (s.cp(i) == ' ' ? 1 : 0);
  if (j < s.end && s.cls(j) == kOther) {
    size_t k = s.run_end(j, kOther);
    while (k < s.end && is_line_break(s.cp(k))) ++k;
    return k - i;
  }
  // Whitespace from here on. \s*[\r\n]+ backtracks to the last line break of the run.
  const size_t k = s.run_end(i, kSpace);
  for (size_t m = k; m > i; --m) {
    if (is_line_break(s.cp(m - 1))) return m - i;
  }
  return match_whitespace(s, i);
}

template <typename Match>
void split_span(const Codepoints& cps, size_t begin, size_t end, std::string_view text,
                std::vector<std::string_view>& pieces, Match match) {
  const Span span{cps, end};
  size_t i = begin;
  while (i < end) {
    const size_t n = match(span, i);
    pieces.push_back(text.substr(cps.offset[i], cps.offset[i + n] - cps.offset[i]));
    i += n;
  }
}

struct NamedKind {
  std::string_view name;
  PreTokenizerKind kind;
};

// Names as llama.cpp's converter writes them to tokenizer.ggml.pre, grouped by the regex
// their tokenizer.json uses.
constexpr std::array kNamedKinds = {
    NamedKind{"default", PreTokenizerKind::kGpt2},
    NamedKind{"gpt2", PreTokenizerKind::kGpt2},
    NamedKind{"gpt-2", PreTokenizerKind::kGpt2},
    NamedKind{"olmo", PreTokenizerKind::kGpt2},
    NamedKind{"mpt", PreTokenizerKind::kGpt2},
    NamedKind{"llama3", PreTokenizerKind::kLlama3},
    NamedKind{"llama-v3", PreTokenizerKind::kLlama3},
    NamedKind{"llama-bpe", PreTokenizerKind::kLlama3},
    NamedKind{"smaug-bpe", PreTokenizerKind::kLlama3},
    NamedKind{"dbrx", PreTokenizerKind::kLlama3},
    NamedKind{"qwen2", PreTokenizerKind::kQwen2},
    NamedKind{"stablelm2", PreTokenizerKind::kQwen2},
    NamedKind{"smollm", PreTokenizerKind::kSmollm},
    NamedKind{"starcoder", PreTokenizerKind::kSmollm},
    NamedKind{"refact", PreTokenizerKind::kSmollm},
    NamedKind{"codeshell", PreTokenizerKind::kSmollm},
};

}  // namespace

Result<PreTokenizerKind> pre_tokenizer_from_name(std::string_view name) {
  for (const NamedKind& named : kNamedKinds) {
    if (named.name == name) return named.kind;
  }
  std::string known;
  for (const NamedKind& named : kNamedKinds) {
    known += known.empty() ? "" : ", ";
    known += named.name;
  }
  return make_error(StatusCode::kUnsupported,
                    "tokenizer.ggml.pre '{}' is not a supported pre-tokenizer (known: {})", name,
                    known);
}

void pre_tokenize(PreTokenizerKind kind, std::string_view text,
                  std::vector<std::string_view>& pieces) {
  if (text.empty()) return;
  Codepoints cps;
  decode(text, cps);
  const size_t n = cps.cp.size();
  switch (kind) {
    case PreTokenizerKind::kGpt2: split_span(cps, 0, n, text, pieces, match_gpt2); break;
    case PreTokenizerKind::kLlama3:
      split_span(cps, 0, n, text, pieces,
                 [](const Span& s, size_t i) { return match_llama3(s, i, 3); });
      break;
    case PreTokenizerKind::kQwen2:
      split_span(cps, 0, n, text, pieces,
                 [](const Span& s, size_t i) { return match_llama3(s, i, 1); });
      break;
    case PreTokenizerKind::kSmollm: {
      size_t start = 0;
      for (size_t i = 0; i < n; ++i) {
        if (cps.cls[i] != kNumber) continue;
        split_span(cps, start, i, text, pieces, match_gpt2);
        pieces.push_back(text.substr(cps.offset[i], cps.offset[i + 1] - cps.offset[i]));
        start = i + 1;
      }
      split_span(cps, start, n, text, pieces, match_gpt2);
      break;
    }
  }
}

}  // namespace llamaserve
