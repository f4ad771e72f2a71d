#include "http/content_decoding.h"

#include <zlib.h>

#include <algorithm>

namespace llamaserve::http {

Result<std::string> decode_content(std::string_view encoded, uint64_t max_bytes) {
  z_stream stream{};
  // 15 window bits + 32: detect a gzip or a zlib header.
  if (inflateInit2(&stream, 15 + 32) != Z_OK) {
    return Status(StatusCode::kInternal, "cannot initialise zlib");
  }
  std::string out;
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(encoded.data()));
  stream.avail_in = static_cast<uInt>(encoded.size());
  constexpr size_t kStep = 64 << 10;
  int result = Z_OK;
  while (result != Z_STREAM_END) {
    const size_t used = out.size();
    if (used >= max_bytes + 1) break;
    const size_t step = std::min<uint64_t>(kStep, max_bytes + 1 - used);
    out.resize(used + step);
    stream.next_out = reinterpret_cast<Bytef*>(out.data() + used);
    stream.avail_out = static_cast<uInt>(step);
    result = inflate(&stream, Z_NO_FLUSH);
    out.resize(used + step - stream.avail_out);
    if (result == Z_BUF_ERROR && stream.avail_in == 0) break;  // truncated
    if (result != Z_OK && result != Z_STREAM_END && result != Z_BUF_ERROR) break;
  }
  const bool ended = result == Z_STREAM_END;
  const bool trailing = stream.avail_in != 0;
  inflateEnd(&stream);
  if (out.size() > max_bytes) {
    return make_error(StatusCode::kOutOfRange,
                      "the request body inflates to more than this server accepts ({} bytes, "
                      "--max-body-bytes)",
                      max_bytes);
  }
  if (!ended) return Status(StatusCode::kInvalidArgument, "the compressed body is corrupt or cut");
  if (trailing) {
    return Status(StatusCode::kInvalidArgument, "bytes follow the end of the compressed body");
  }
  return out;
}

}  // namespace llamaserve::http
