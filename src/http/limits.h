// What one connection may cost the server: sizes enforced while a request is read, and the
// timeouts that free a connection that stops making progress.
#pragma once

#include <chrono>
#include <cstdint>

namespace llamaserve::http {

struct RequestLimits {
  uint32_t max_request_line_bytes = 8192;  // longer: 414
  uint32_t max_header_line_bytes = 8192;   // one field line; longer: 431
  uint32_t max_header_bytes = 32768;       // request line + all field lines; more: 431
  uint64_t max_body_bytes = 4 << 20;       // after de-chunking and decompression; more: 413
};

struct ConnectionLimits {
  RequestLimits request;
  // A keep-alive connection with no request under way is closed after this.
  std::chrono::milliseconds idle_timeout{60000};
  // From a request's first byte to the end of its head; then 408 and close.
  std::chrono::milliseconds header_timeout{10000};
  // From the end of the head to the end of the body; then 408 and close.
  std::chrono::milliseconds body_timeout{30000};
  // A response write that makes no progress for this long closes the connection.
  std::chrono::milliseconds write_timeout{30000};
  // Connections open at once; more are accepted and closed at once.
  int max_connections = 8192;
  // Bytes of a streamed response queued for a slow reader before the producer waits.
  size_t max_queued_response_bytes = 256 << 10;
};

}  // namespace llamaserve::http
