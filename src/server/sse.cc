#include "server/sse.h"

namespace llamaserve::server {

std::string sse_event(std::string_view event, std::string_view data) {
  std::string out;
  out.reserve(data.size() + event.size() + 16);
  if (!event.empty()) {
    out.append("event: ").append(event).push_back('\n');
  }
  size_t line_start = 0;
  for (;;) {
    size_t line_end = data.find_first_of("\r\n", line_start);
    out.append("data: ").append(data.substr(line_start, line_end - line_start)).push_back('\n');
    if (line_end == std::string_view::npos) break;
    line_start = line_end + 1;
    if (data[line_end] == '\r' && line_start < data.size() && data[line_start] == '\n') {
      ++line_start;
    }
  }
  out.push_back('\n');
  return out;
}

}  // namespace llamaserve::server
