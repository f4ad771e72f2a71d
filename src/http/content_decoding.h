// Request bodies sent with Content-Encoding gzip or deflate, inflated under the body limit:
// the output is counted as it is produced, so a small body that would inflate past the limit
// costs no more than the limit.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace llamaserve::http {

// Inflates a gzip or zlib ("deflate") stream. kOutOfRange once the output would pass
// `max_bytes`; kInvalidArgument for a corrupt or truncated stream or bytes after its end.
Result<std::string> decode_content(std::string_view encoded, uint64_t max_bytes);

}  // namespace llamaserve::http
