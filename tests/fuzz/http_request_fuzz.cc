// libFuzzer target for the HTTP request reader (http/request_reader.h): the input is what a
// client sends on one connection, read as a sequence of pipelined requests. Besides "never
// crash, never read out of bounds", it checks:
//   - parse() never consumes more than it is given, and stops at each head and request end;
//   - a failure carries one of the statuses the reader documents, with a message;
//   - an accepted request respects every limit (head sizes, body size after de-chunking and
//     decompression) and has version 1.0 or 1.1 and a target starting with '/' (or "*");
//   - the outcome does not depend on how the bytes are split into reads: the whole input at
//     once and the same input in small pieces give the same requests and the same failure.
// A violated property aborts, which libFuzzer reports as a crash with the input saved.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "http/request_reader.h"

namespace llamaserve::http {
namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "http_request_fuzz property violated: %s\n", what);
  std::abort();
}

RequestLimits fuzz_limits() {
  RequestLimits limits;
  limits.max_request_line_bytes = 200;
  limits.max_header_line_bytes = 200;
  limits.max_header_bytes = 600;
  limits.max_body_bytes = 2000;
  return limits;
}

struct Outcome {
  std::vector<std::string> requests;  // method, target, version, headers and body, flattened
  int failure = 0;                    // status of the failure that ended the input, if any
};

std::string flatten(const Request& request) {
  std::string text = request.method + ' ' + request.target + ' ' + std::to_string(request.version);
  for (const auto& [name, value] : request.headers) text += '\n' + name + ':' + value;
  return text + "\n\n" + request.body;
}

void check_request(const Request& request, const RequestLimits& limits) {
  if (request.version != 10 && request.version != 11) fail("version other than 1.0/1.1");
  if (request.target.empty() || (request.target[0] != '/' && request.target != "*")) {
    fail("target not an absolute path");
  }
  if (request.body.size() > limits.max_body_bytes) fail("body over the limit");
  if (request.target.size() > limits.max_request_line_bytes) fail("target over the line limit");
  size_t head_bytes = request.method.size() + request.target.size();
  for (const auto& [name, value] : request.headers) {
    if (name.size() + value.size() > limits.max_header_line_bytes) fail("field over the limit");
    head_bytes += name.size() + value.size();
  }
  if (head_bytes > limits.max_header_bytes) fail("head over the limit");
}

// Feeds `input` in pieces of `step` bytes (0 = at once), reading every body, for up to 16
// requests.
Outcome read_all(std::string_view input, size_t step) {
  static const std::set<int> kStatuses = {400, 413, 414, 415, 417, 431, 501, 505};
  const RequestLimits limits = fuzz_limits();
  RequestReader reader(limits);
  Outcome outcome;
  std::string buffer;
  size_t offset = 0;
  while (outcome.requests.size() < 16) {
    bool progressed = false;
    if (offset < input.size()) {
      const size_t take = step == 0 ? input.size() - offset : std::min(step, input.size() - offset);
      buffer.append(input.substr(offset, take));
      offset += take;
      progressed = true;
    }
    while (true) {
      const size_t used = reader.parse(buffer);
      if (used > buffer.size()) fail("consumed more than given");
      buffer.erase(0, used);
      if (used > 0) progressed = true;
      const auto state = reader.state();
      if (state == RequestReader::State::kHeadReady) {
        reader.read_body();
        progressed = true;
        continue;
      }
      if (state == RequestReader::State::kComplete) {
        const Request request = reader.take();
        check_request(request, limits);
        outcome.requests.push_back(flatten(request));
        progressed = true;
        if (outcome.requests.size() >= 16) return outcome;
        continue;
      }
      if (state == RequestReader::State::kFailed) {
        if (!kStatuses.contains(reader.error().status)) fail("undocumented status");
        if (reader.error().message.empty()) fail("failure without a message");
        outcome.failure = reader.error().status;
        return outcome;
      }
      break;  // needs more bytes
    }
    if (!progressed && offset >= input.size()) return outcome;
  }
  return outcome;
}

}  // namespace
}  // namespace llamaserve::http

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace llamaserve::http;
  if (size < 1) return 0;
  const size_t step = 1 + data[0] % 7;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  const Outcome whole = read_all(input, 0);
  const Outcome pieces = read_all(input, step);
  if (whole.requests != pieces.requests) fail("requests depend on how the input is split");
  if (whole.failure != pieces.failure) fail("failure depends on how the input is split");
  return 0;
}
