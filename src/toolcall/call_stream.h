// Streams a generation that may call tools: text that cannot be part of a call goes to the
// client at once; from the first sign of a call (a syntax's marker, or a JSON object or array
// as the first thing in the output) the text is held until the end, where parse_output
// decides. Text that turns out not to be a call is sent then, so nothing is lost; a partial
// marker at the end of a delta is held back until the next one shows what it is.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "toolcall/tool_call.h"

namespace llamaserve::toolcall {

class CallStream {
 public:
  explicit CallStream(Syntax syntax);

  // The content that can be sent now (possibly empty).
  std::string feed(std::string_view text);
  // At the end of the generation: the content not sent yet, and the calls.
  ParsedOutput finish();

 private:
  // The earliest complete marker in pending_, or npos.
  size_t find_marker() const;
  // How many bytes at the end of pending_ could be the start of a marker.
  size_t partial_marker_tail() const;

  Syntax syntax_;
  std::vector<std::string_view> markers_;
  std::string pending_;    // received, not sent
  bool sent_any_ = false;  // content went out (white space at the start waits: a call may
                           // follow it)
  bool in_call_ = false;   // everything from here on is held
};

}  // namespace llamaserve::toolcall
