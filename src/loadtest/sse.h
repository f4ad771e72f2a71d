// The client side of a streamed OpenAI answer: an incremental text/event-stream parser (bytes
// may be split anywhere, even inside a "\r\n") and the reading of one chunk's JSON.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace llamaserve::loadtest {

struct SseEvent {
  std::string type = "message";  // the "event:" field, "message" when absent
  std::string data;              // the "data:" lines joined with "\n"
};

// The WHATWG event-stream rules: lines end at "\r\n", "\n" or "\r"; a blank line dispatches
// the event when it has data; "field: value" drops one leading space of the value; lines
// starting with ":" are comments; fields other than event and data are ignored.
class SseParser {
 public:
  // A line longer than this is an error (a server that never ends its lines).
  static constexpr size_t kMaxLineBytes = 16 << 20;

  // Appends the events completed by `bytes` to `out`.
  Status feed(std::string_view bytes, std::vector<SseEvent>& out);

 private:
  void end_line(std::vector<SseEvent>& out);

  std::string line_;       // the line being read
  bool after_cr_ = false;  // the last byte was "\r": a "\n" next belongs to the same ending
  SseEvent event_;         // fields of the event being read
  bool has_data_ = false;
};

// What one "data:" payload of a completions or chat completions stream says.
struct StreamChunk {
  bool done = false;               // "[DONE]"
  bool content = false;            // carries generated text (choices[0].text or delta.content)
  int64_t completion_tokens = -1;  // from a "usage" object, -1 when none
  int64_t prompt_tokens = -1;
  std::string error;  // an "error" object's message (the stream failed)
};

// Never fails: a payload that is not JSON is reported as an error chunk.
StreamChunk read_stream_chunk(std::string_view data);

}  // namespace llamaserve::loadtest
