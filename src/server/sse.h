// Server-sent events framing (WHATWG HTML, "server-sent events"): an event is optional
// "event:" and "id:" lines, one "data:" line per line of the payload, and a blank line.
#pragma once

#include <string>
#include <string_view>

namespace llamaserve::server {

// Formats one event. `event` empty = no "event:" line (clients then see type "message").
// The payload is split at "\r\n", "\n" and "\r" into one "data:" line each, so a client that
// joins data lines with "\n" gets the payload back (with CR and CRLF turned into LF: SSE
// cannot carry them). Every data line is written as "data: " + line, so a payload line that
// starts with a space keeps it (the parser strips exactly one space after the colon).
std::string sse_event(std::string_view event, std::string_view data);

inline std::string sse_data(std::string_view data) { return sse_event({}, data); }

// The OpenAI stream terminator.
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace llamaserve::server
