#include "model/importers/sentencepiece_model.h"

#include <cstring>

#include "core/mapped_file.h"

namespace llamaserve {
namespace {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

constexpr size_t kMaxPieces = 1 << 22;

// A cursor over one message's bytes. Every read checks the bytes left.
class WireReader {
 public:
  WireReader(const uint8_t* data, size_t size, const char* message)
      : p_(data), end_(data + size), message_(message) {}

  bool done() const { return p_ == end_; }

  Status varint(uint64_t* value) {
    uint64_t result = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ == end_) return error("a varint runs past the end");
      const uint8_t byte = *p_++;
      result |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) {
        *value = result;
        return Status::ok();
      }
    }
    return error("a varint is longer than 10 bytes");
  }

  Status key(uint32_t* field, WireType* wire) {
    uint64_t k = 0;
    LS_RETURN_IF_ERROR(varint(&k));
    *field = static_cast<uint32_t>(k >> 3);
    *wire = static_cast<WireType>(k & 7);
    if (*field == 0) return error("field number 0");
    return Status::ok();
  }

  Status bytes(const uint8_t** data, size_t* size) {
    uint64_t n = 0;
    LS_RETURN_IF_ERROR(varint(&n));
    if (n > static_cast<uint64_t>(end_ - p_)) {
      return error("a length-delimited field of " + std::to_string(n) + " bytes runs past the end");
    }
    *data = p_;
    *size = static_cast<size_t>(n);
    p_ += n;
    return Status::ok();
  }

  Status fixed32(uint32_t* value) {
    if (end_ - p_ < 4) return error("a 32-bit field runs past the end");
    *value = static_cast<uint32_t>(p_[0]) | static_cast<uint32_t>(p_[1]) << 8 |
             static_cast<uint32_t>(p_[2]) << 16 | static_cast<uint32_t>(p_[3]) << 24;
    p_ += 4;
    return Status::ok();
  }

  Status skip(WireType wire) {
    switch (wire) {
      case kVarint: {
        uint64_t ignored = 0;
        return varint(&ignored);
      }
      case kFixed64:
        if (end_ - p_ < 8) return error("a 64-bit field runs past the end");
        p_ += 8;
        return Status::ok();
      case kLengthDelimited: {
        const uint8_t* ignored;
        size_t n;
        return bytes(&ignored, &n);
      }
      case kFixed32: {
        uint32_t ignored = 0;
        return fixed32(&ignored);
      }
    }
    return error("unsupported wire type " + std::to_string(static_cast<uint32_t>(wire)));
  }

  // Value of a field expected to be a varint; other wire types are an error.
  Status varint_field(WireType wire, uint64_t* value, const char* name) {
    if (wire != kVarint) return error(std::string(name) + " is not a varint");
    return varint(value);
  }

  Status error(const std::string& what) const {
    return make_error(StatusCode::kInvalidArgument, "tokenizer.model: {}: {}", message_, what);
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
  const char* message_;
};

Status parse_piece(const uint8_t* data, size_t size, SentencePieceModel& model) {
  WireReader r(data, size, "SentencePiece");
  std::string piece;
  float score = 0.0f;
  int32_t type = 1;
  bool has_piece = false;
  while (!r.done()) {
    uint32_t field;
    WireType wire;
    LS_RETURN_IF_ERROR(r.key(&field, &wire));
    if (field == 1 && wire == kLengthDelimited) {
      const uint8_t* bytes;
      size_t n;
      LS_RETURN_IF_ERROR(r.bytes(&bytes, &n));
      piece.assign(reinterpret_cast<const char*>(bytes), n);
      has_piece = true;
    } else if (field == 2 && wire == kFixed32) {
      uint32_t bits = 0;
      LS_RETURN_IF_ERROR(r.fixed32(&bits));
      std::memcpy(&score, &bits, sizeof(score));
    } else if (field == 3) {
      uint64_t value = 0;
      LS_RETURN_IF_ERROR(r.varint_field(wire, &value, "type"));
      if (value < 1 || value > 6)
        return r.error("piece type " + std::to_string(value) + " is unknown");
      type = static_cast<int32_t>(value);
    } else {
      LS_RETURN_IF_ERROR(r.skip(wire));
    }
  }
  if (!has_piece) {
    return r.error("piece " + std::to_string(model.pieces.size()) + " has no text");
  }
  model.pieces.push_back(std::move(piece));
  model.scores.push_back(score);
  model.types.push_back(type);
  return Status::ok();
}

Status parse_trainer_spec(const uint8_t* data, size_t size, SentencePieceModel& model) {
  WireReader r(data, size, "TrainerSpec");
  while (!r.done()) {
    uint32_t field;
    WireType wire;
    LS_RETURN_IF_ERROR(r.key(&field, &wire));
    uint64_t value = 0;
    switch (field) {
      case 3:
        LS_RETURN_IF_ERROR(r.varint_field(wire, &value, "model_type"));
        model.model_type = static_cast<int32_t>(value);
        break;
      case 35:
        LS_RETURN_IF_ERROR(r.varint_field(wire, &value, "byte_fallback"));
        model.byte_fallback = value != 0;
        break;
      // int32 ids: negative values arrive sign-extended to 64 bits.
      case 40:
        LS_RETURN_IF_ERROR(r.varint_field(wire, &value, "unk_id"));
        model.unk_id = static_cast<int32_t>(static_cast<int64_t>(value));
        break;
      case 41:
        LS_RETURN_IF_ERROR(r.varint_field(wire, &value, "bos_id"));
        model.bos_id = static_cast<int32_t>(static_cast<int64_t>(value));
        break;
      case 42:
        LS_RETURN_IF_ERROR(r.varint_field(wire, &value, "eos_id"));
        model.eos_id = static_cast<int32_t>(static_cast<int64_t>(value));
        break;
      case 43:
        LS_RETURN_IF_ERROR(r.varint_field(wire, &value, "pad_id"));
        model.pad_id = static_cast<int32_t>(static_cast<int64_t>(value));
        break;
      default: LS_RETURN_IF_ERROR(r.skip(wire));
    }
  }
  return Status::ok();
}

Status parse_normalizer_spec(const uint8_t* data, size_t size, SentencePieceModel& model) {
  WireReader r(data, size, "NormalizerSpec");
  while (!r.done()) {
    uint32_t field;
    WireType wire;
    LS_RETURN_IF_ERROR(r.key(&field, &wire));
    if (field == 3) {
      uint64_t value = 0;
      LS_RETURN_IF_ERROR(r.varint_field(wire, &value, "add_dummy_prefix"));
      model.add_dummy_prefix = value != 0;
    } else {
      LS_RETURN_IF_ERROR(r.skip(wire));
    }
  }
  return Status::ok();
}

}  // namespace

Result<SentencePieceModel> parse_sentencepiece_model(const uint8_t* data, size_t size) {
  SentencePieceModel model;
  WireReader r(data, size, "ModelProto");
  while (!r.done()) {
    uint32_t field;
    WireType wire;
    LS_RETURN_IF_ERROR(r.key(&field, &wire));
    if (field >= 1 && field <= 3 && wire == kLengthDelimited) {
      const uint8_t* bytes;
      size_t n;
      LS_RETURN_IF_ERROR(r.bytes(&bytes, &n));
      if (field == 1) {
        if (model.pieces.size() >= kMaxPieces) return r.error("more than 4M pieces");
        LS_RETURN_IF_ERROR(parse_piece(bytes, n, model));
      } else if (field == 2) {
        LS_RETURN_IF_ERROR(parse_trainer_spec(bytes, n, model));
      } else {
        LS_RETURN_IF_ERROR(parse_normalizer_spec(bytes, n, model));
      }
    } else {
      LS_RETURN_IF_ERROR(r.skip(wire));
    }
  }
  if (model.pieces.empty()) return r.error("no pieces (not a SentencePiece model?)");
  return model;
}

Result<SentencePieceModel> read_sentencepiece_model(const std::string& path) {
  LS_ASSIGN_OR_RETURN(auto file, MappedFile::open(path));
  Result<SentencePieceModel> model = parse_sentencepiece_model(file->data(), file->size());
  if (!model.is_ok()) return model.status().with_context(path);
  return model;
}

}  // namespace llamaserve
