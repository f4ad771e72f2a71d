// Incremental detokenizer for streaming: push one token at a time, get back only text that
// is complete, valid UTF-8.
//
// A character split across tokens (byte-fallback pieces, or byte-level BPE cutting a CJK
// character or an emoji) is held back until its last byte arrives. Bytes that can never
// become a valid character are replaced by U+FFFD as soon as that is certain (a byte that
// cannot start a sequence, or a lead byte followed by a byte that cannot continue it); an
// unfinished sequence at the end becomes U+FFFD in flush(). Unlike Tokenizer::decode, no
// leading space is removed: a stream continues a prompt.
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace llamaserve {

class StreamDecoder {
 public:
  // skip_special: control tokens contribute nothing (otherwise their text, e.g. "<|im_end|>").
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = true);

  // Text that became complete with this token (possibly empty).
  std::string push(int32_t token);
  // Whatever is still held back, as U+FFFD; the decoder is then empty and can be reused.
  std::string flush();

 private:
  std::string drain(bool final);

  Tokenizer tokenizer_;  // a copy shares the tables, so the decoder cannot outlive them
  bool skip_special_;
  std::string pending_;  // bytes after the last complete character: at most 3
};

}  // namespace llamaserve
