// A minimal SSE parser following the WHATWG "event stream interpretation" algorithm, used by
// the tests to read back what the server writes.
#pragma once

#include <string>
#include <vector>

namespace llamaserve::server::test_util {

struct ParsedEvent {
  std::string type;
  std::string data;
};

inline std::vector<ParsedEvent> parse_sse(const std::string& stream) {
  std::vector<ParsedEvent> events;
  std::string type, data;
  bool has_data = false;
  size_t pos = 0;
  while (pos < stream.size()) {
    const size_t end = stream.find_first_of("\r\n", pos);
    if (end == std::string::npos) break;  // an incomplete line is not dispatched
    std::string line = stream.substr(pos, end - pos);
    pos = end + 1;
    if (stream[end] == '\r' && pos < stream.size() && stream[pos] == '\n') ++pos;
    if (line.empty()) {
      if (has_data) events.push_back({type.empty() ? "message" : type, data});
      type.clear(), data.clear(), has_data = false;
      continue;
    }
    const size_t colon = line.find(':');
    const std::string field = line.substr(0, colon);
    std::string value = colon == std::string::npos ? "" : line.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.erase(0, 1);
    if (field == "event") type = value;
    if (field == "data") {
      if (has_data) data.push_back('\n');
      data += value;
      has_data = true;
    }
  }
  return events;
}

}  // namespace llamaserve::server::test_util
