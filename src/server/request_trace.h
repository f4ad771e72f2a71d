// The identifiers a client may send to follow one request through its systems: X-Request-Id
// and the W3C Trace Context `traceparent`. Both are echoed on the response and logged.
#pragma once

#include <string>
#include <string_view>

namespace llamaserve::server {

// `value` when it is a usable request id: 1..128 characters of [A-Za-z0-9._~:/+=@-];
// otherwise "" (the server then uses its own id).
std::string accepted_request_id(std::string_view value);

struct TraceParent {
  std::string header;     // the whole value, echoed as it came
  std::string trace_id;   // 32 lower-case hex digits, not all zero
  std::string parent_id;  // 16 lower-case hex digits, not all zero
};

// The fields of a `traceparent` value (W3C Trace Context, level 1), or an empty header when
// it does not parse: version 00 has exactly four fields; a later version may add fields after
// a '-'; version ff is invalid.
TraceParent parse_traceparent(std::string_view value);

}  // namespace llamaserve::server
