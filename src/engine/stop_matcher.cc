#include "engine/stop_matcher.h"

#include <algorithm>

namespace llamaserve {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stop_strings) {
  for (auto& stop : stop_strings) {
    if (!stop.empty()) stops_.push_back(std::move(stop));
  }
}

StopStringMatcher::Output StopStringMatcher::push(std::string_view piece) {
  Output out;
  if (stopped_) {
    out.stopped = true;
    return out;
  }
  if (stops_.empty()) {
    out.text.assign(piece);
    return out;
  }
  held_.append(piece);

  // The stop string that completes first wins (the longer one when two end together), so
  // the result does not depend on how the text was cut into pieces. `held_` had no match
  // before this piece, and find() gives each stop string its earliest end.
  size_t match = std::string::npos;
  size_t match_end = std::string::npos;
  for (const std::string& stop : stops_) {
    size_t at = held_.find(stop);
    if (at == std::string::npos) continue;
    size_t end = at + stop.size();
    if (end < match_end || (end == match_end && at < match)) {
      match = at;
      match_end = end;
    }
  }
  if (match != std::string::npos) {
    out.text = held_.substr(0, match);
    out.stopped = true;
    held_.clear();
    stopped_ = true;
    return out;
  }

  // Hold back the longest suffix of `held_` that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& stop : stops_) {
    size_t longest = std::min(stop.size() - 1, held_.size());
    for (size_t n = longest; n > keep; --n) {
      if (std::string_view(held_).substr(held_.size() - n) == std::string_view(stop).substr(0, n)) {
        keep = n;
        break;
      }
    }
  }
  out.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopStringMatcher::flush() {
  std::string rest = std::move(held_);
  held_.clear();
  return stopped_ ? std::string() : rest;
}

}  // namespace llamaserve
