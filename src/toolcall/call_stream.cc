#include "toolcall/call_stream.h"

#include <algorithm>

namespace llamaserve::toolcall {

CallStream::CallStream(Syntax syntax) : syntax_(syntax), markers_(call_markers(syntax)) {}

std::string CallStream::feed(std::string_view text) {
  pending_.append(text);
  if (in_call_) return {};
  if (!sent_any_) {
    const size_t first = pending_.find_first_not_of(" \t\r\n");
    if (first == std::string::npos) return {};
    if (pending_[first] == '{' || pending_[first] == '[') {
      in_call_ = true;
      return {};
    }
  }
  std::string out;
  if (const size_t marker = find_marker(); marker != std::string::npos) {
    out = pending_.substr(0, marker);
    pending_.erase(0, marker);
    in_call_ = true;
  } else {
    out = pending_.substr(0, pending_.size() - partial_marker_tail());
    pending_.erase(0, out.size());
  }
  if (!out.empty()) sent_any_ = true;
  return out;
}

ParsedOutput CallStream::finish() {
  ParsedOutput out;
  if (in_call_) out = parse_output(pending_, syntax_);
  if (out.calls.empty()) out.content = std::move(pending_);
  pending_.clear();
  return out;
}

size_t CallStream::find_marker() const {
  size_t earliest = std::string::npos;
  for (std::string_view marker : markers_) earliest = std::min(earliest, pending_.find(marker));
  return earliest;
}

size_t CallStream::partial_marker_tail() const {
  size_t longest = 0;
  const std::string_view text = pending_;
  for (std::string_view marker : markers_) {
    for (size_t n = std::min(marker.size() - 1, text.size()); n > longest; --n) {
      if (text.substr(text.size() - n) == marker.substr(0, n)) {
        longest = n;
        break;
      }
    }
  }
  return longest;
}

}  // namespace llamaserve::toolcall
