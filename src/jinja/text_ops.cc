#include "jinja/text_ops.h"

#include <algorithm>

#include "jinja/errors.h"

namespace llamaserve::jinja {

namespace {

// Length of the UTF-8 sequence starting at text[i], 1 for a byte that starts none.
size_t sequence_length(std::string_view text, size_t i) {
  const auto lead = static_cast<unsigned char>(text[i]);
  size_t n = lead < 0x80           ? 1
             : (lead >> 5) == 0x6  ? 2
             : (lead >> 4) == 0xE  ? 3
             : (lead >> 3) == 0x1E ? 4
                                   : 1;
  if (i + n > text.size()) return 1;
  for (size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) return 1;
  }
  return n;
}

}  // namespace

bool is_space_char(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' || c == '\x1c' ||
         c == '\x1d' || c == '\x1e' || c == '\x1f';
}

std::vector<size_t> code_point_offsets(std::string_view text) {
  std::vector<size_t> offsets;
  offsets.reserve(text.size() + 1);
  for (size_t i = 0; i < text.size(); i += sequence_length(text, i)) offsets.push_back(i);
  offsets.push_back(text.size());
  return offsets;
}

size_t code_point_count(std::string_view text) {
  size_t n = 0;
  for (size_t i = 0; i < text.size(); i += sequence_length(text, i)) ++n;
  return n;
}

std::vector<int64_t> slice_positions(int64_t length, std::optional<int64_t> start,
                                     std::optional<int64_t> stop, std::optional<int64_t> step) {
  const int64_t s = step.value_or(1);
  if (s == 0) runtime_error("slice step cannot be zero");
  auto adjust = [&](std::optional<int64_t> v, int64_t fallback, bool is_stop) -> int64_t {
    (void)is_stop;
    if (!v) return fallback;
    int64_t x = *v;
    if (x < 0) {
      x += length;
      if (x < 0) x = s < 0 ? -1 : 0;
    } else if (x >= length) {
      x = s < 0 ? length - 1 : length;
    }
    return x;
  };
  const int64_t begin = adjust(start, s < 0 ? length - 1 : 0, false);
  const int64_t end = adjust(stop, s < 0 ? -1 : length, true);
  std::vector<int64_t> positions;
  if (s > 0) {
    for (int64_t i = begin; i < end; i += s) positions.push_back(i);
  } else {
    for (int64_t i = begin; i > end; i += s) positions.push_back(i);
  }
  return positions;
}

StringData slice_text(const StringData& s, const std::vector<int64_t>& positions) {
  const std::vector<size_t> offsets = code_point_offsets(s.text);
  TextBuilder out;
  for (size_t k = 0; k < positions.size();) {
    // Runs of consecutive code points are copied at once.
    size_t run = k + 1;
    while (run < positions.size() && positions[run] == positions[run - 1] + 1) ++run;
    out.append_slice(s, offsets[positions[k]], offsets[positions[run - 1] + 1]);
    k = run;
  }
  return out.take();
}

StringData strip_text(const StringData& s, StripSide side,
                      const std::optional<std::string>& chars) {
  const std::vector<size_t> offsets = code_point_offsets(s.text);
  const size_t n = offsets.size() - 1;
  auto strippable = [&](size_t i) {
    const std::string_view cp(s.text.data() + offsets[i], offsets[i + 1] - offsets[i]);
    if (!chars) return cp.size() == 1 && is_space_char(cp[0]);
    // chars is a set of code points
    for (size_t j = 0; j < chars->size();) {
      const size_t len =
          std::max<size_t>(1, code_point_offsets(std::string_view(*chars).substr(j))[1]);
      if (std::string_view(*chars).substr(j, len) == cp) return true;
      j += len;
    }
    return false;
  };
  size_t begin = 0;
  size_t end = n;
  if (side != StripSide::kRight) {
    while (begin < end && strippable(begin)) ++begin;
  }
  if (side != StripSide::kLeft) {
    while (end > begin && strippable(end - 1)) --end;
  }
  TextBuilder out;
  out.append_slice(s, offsets[begin], offsets[end]);
  return out.take();
}

std::vector<StringData> split_text(const StringData& s, const std::optional<std::string>& sep,
                                   int64_t maxsplit) {
  std::vector<StringData> parts;
  auto piece = [&](size_t b, size_t e) {
    TextBuilder out;
    out.append_slice(s, b, e);
    parts.push_back(out.take());
  };
  const std::string& t = s.text;
  if (sep) {
    if (sep->empty()) runtime_error("empty separator");
    size_t begin = 0;
    int64_t splits = 0;
    while (maxsplit < 0 || splits < maxsplit) {
      const size_t at = t.find(*sep, begin);
      if (at == std::string::npos) break;
      piece(begin, at);
      begin = at + sep->size();
      ++splits;
    }
    piece(begin, t.size());
    return parts;
  }
  size_t i = 0;
  int64_t splits = 0;
  while (true) {
    while (i < t.size() && is_space_char(t[i])) ++i;
    if (i >= t.size()) break;
    if (maxsplit >= 0 && splits >= maxsplit) {
      size_t end = t.size();
      while (end > i && is_space_char(t[end - 1])) --end;
      piece(i, end);
      break;
    }
    size_t j = i;
    while (j < t.size() && !is_space_char(t[j])) ++j;
    piece(i, j);
    ++splits;
    i = j;
  }
  return parts;
}

StringData replace_text(const StringData& s, const std::string& from, const StringData& to,
                        int64_t count) {
  TextBuilder out;
  const std::string& t = s.text;
  auto insert = [&](size_t replaced_begin, size_t replaced_end) {
    bool replaced_tainted = false;
    for (const ByteRange& r : s.taint) {
      if (r.begin < std::max(replaced_end, replaced_begin + 1) && r.end > replaced_begin) {
        replaced_tainted = true;
      }
    }
    const size_t at = out.size();
    out.append(to);
    if (replaced_tainted) out.taint_from(at);
  };
  if (from.empty()) {
    // Python inserts `to` before every code point and at the end.
    const std::vector<size_t> offsets = code_point_offsets(t);
    int64_t done = 0;
    for (size_t k = 0; k + 1 < offsets.size(); ++k) {
      if (count < 0 || done < count) {
        insert(offsets[k], offsets[k]);
        ++done;
      }
      out.append_slice(s, offsets[k], offsets[k + 1]);
    }
    if (count < 0 || done < count) insert(t.size(), t.size());
    return out.take();
  }
  size_t begin = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t at = t.find(from, begin);
    if (at == std::string::npos) break;
    out.append_slice(s, begin, at);
    insert(at, at + from.size());
    begin = at + from.size();
    ++done;
  }
  out.append_slice(s, begin, t.size());
  return out.take();
}

StringData map_case(const StringData& s, CaseMap mode) {
  StringData out = s;
  bool word_start = true;
  bool first = true;
  for (char& c : out.text) {
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    switch (mode) {
      case CaseMap::kUpper:
        if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
        break;
      case CaseMap::kLower:
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
        break;
      case CaseMap::kCapitalize:
        if (first && c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
        if (!first && c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
        break;
      case CaseMap::kTitle:
        if (word_start && c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
        if (!word_start && c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
        break;
    }
    first = false;
    // Python's title() starts a word after any character that is not a letter (cased).
    word_start = !letter && !(static_cast<unsigned char>(c) >= 0x80);
    if (static_cast<unsigned char>(c) >= 0x80) word_start = false;
  }
  return out;
}

}  // namespace llamaserve::jinja
