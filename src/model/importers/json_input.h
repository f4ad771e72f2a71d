// Limits for the JSON files of a checkpoint (config.json, tokenizer.json, safetensors headers
// and indexes), which are untrusted input. nlohmann::json parses iteratively, but copying,
// comparing and dumping a value recurse once per nesting level, so a few megabytes of "[[[["
// would overflow the stack in whatever touches the value next (an error message that dumps
// it, say). Real files nest a handful of levels.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string_view>

#include "core/status.h"

namespace llamaserve {

inline constexpr size_t kMaxJsonNesting = 64;

// Deepest nesting of arrays and objects in `text`; exact for valid JSON (brackets inside
// strings do not count), and whatever it is for invalid JSON, which the parser refuses anyway.
inline size_t json_nesting_depth(std::string_view text) {
  size_t depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, which may be a quote
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

// Call before json::parse on untrusted text; `file` names it in the error.
inline Status check_json_nesting(std::string_view text, std::string_view file) {
  const size_t depth = json_nesting_depth(text);
  if (depth > kMaxJsonNesting) {
    return make_error(StatusCode::kInvalidArgument,
                      "{} nests arrays and objects {} levels deep; at most {} are accepted", file,
                      depth, kMaxJsonNesting);
  }
  return Status::ok();
}

}  // namespace llamaserve
