#include "tokenizer/stream_decoder.h"

#include "tokenizer/unicode.h"

namespace llamaserve {

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

std::string StreamDecoder::push(int32_t token) {
  pending_ += tokenizer_.token_bytes(token, !skip_special_);
  return drain(false);
}

std::string StreamDecoder::flush() { return drain(true); }

std::string StreamDecoder::drain(bool final) {
  std::string out;
  size_t pos = 0;
  while (pos < pending_.size()) {
    const unicode::Utf8Step step = unicode::scan_utf8(pending_, pos);
    if (step.status == unicode::Utf8Status::kIncomplete && !final) break;
    if (step.status == unicode::Utf8Status::kComplete) {
      out.append(pending_, pos, step.length);
    } else {
      unicode::append_utf8(out, 0xFFFD);
    }
    pos += step.length;
  }
  pending_.erase(0, pos);
  return out;
}

}  // namespace llamaserve
