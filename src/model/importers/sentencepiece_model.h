// A SentencePiece tokenizer.model read without the protobuf library: the file is a
// serialized sentencepiece.ModelProto, and the converter needs only a few of its fields.
//
//   ModelProto      1: repeated SentencePiece pieces   2: TrainerSpec   3: NormalizerSpec
//   SentencePiece   1: string piece   2: float score   3: enum type (NORMAL=1 UNKNOWN=2
//                   CONTROL=3 USER_DEFINED=4 UNUSED=5 BYTE=6; absent = NORMAL)
//   TrainerSpec     3: enum model_type (UNIGRAM=1 BPE=2 WORD=3 CHAR=4)  35: bool byte_fallback
//                   40: int32 unk_id  41: bos_id  42: eos_id  43: pad_id
//   NormalizerSpec  3: bool add_dummy_prefix (default true)
// Every other field is skipped by its wire type. The file is untrusted: lengths are checked
// against the remaining bytes and nesting is fixed (no recursion on input).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace llamaserve {

struct SentencePieceModel {
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::vector<int32_t> types;  // SentencePiece piece types, numbered as above
  int32_t model_type = 1;      // UNIGRAM unless the trainer spec says otherwise
  bool byte_fallback = false;
  int32_t unk_id = 0;
  int32_t bos_id = 1;
  int32_t eos_id = 2;
  int32_t pad_id = -1;
  bool add_dummy_prefix = true;
};

Result<SentencePieceModel> parse_sentencepiece_model(const uint8_t* data, size_t size);

// Reads and parses a tokenizer.model file.
Result<SentencePieceModel> read_sentencepiece_model(const std::string& path);

}  // namespace llamaserve
