// StopStringMatcher: finds stop strings in streamed text that arrives in arbitrary pieces
// (one detokenized token at a time), so a stop string split across tokens is still caught.
// Text that could be the beginning of a stop string is held back until the next pieces show
// whether it is one; text of a matched stop string, and everything after it, is never
// released. When several stop strings occur, the one that is complete first in the text
// wins, however the text was split.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace llamaserve {

class StopStringMatcher {
 public:
  // Empty stop strings are ignored.
  explicit StopStringMatcher(std::vector<std::string> stop_strings);

  struct Output {
    std::string text;      // safe to emit now
    bool stopped = false;  // a stop string matched: `text` ends right before it
  };
  // Adds the next piece. After a match every call returns empty text with stopped = true.
  Output push(std::string_view piece);
  // The end of the stream: releases whatever is still held back (no stop string followed).
  std::string flush();

  bool active() const { return !stops_.empty(); }

 private:
  std::vector<std::string> stops_;
  std::string held_;  // unreleased text; no stop string occurs in it
  bool stopped_ = false;
};

}  // namespace llamaserve
