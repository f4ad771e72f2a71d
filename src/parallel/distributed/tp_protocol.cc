#include "parallel/distributed/tp_protocol.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string_view>

namespace llamaserve {
namespace {

constexpr std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) != 0 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrcTable = make_crc_table();

constexpr size_t kChecksumOffset = 16;  // the checksum covers the header bytes before it
constexpr size_t kBatchCountsBytes = 16;

// Appends little-endian values to a frame under construction.
class Writer {
 public:
  explicit Writer(std::vector<uint8_t>& out) : out_(out) {}
  void u8(uint8_t v) { out_.push_back(v); }
  void u16(uint16_t v) { little(v); }
  void u32(uint32_t v) { little(v); }
  void i32(int32_t v) { little(static_cast<uint32_t>(v)); }
  void i64(int64_t v) { little(static_cast<uint64_t>(v)); }
  void u64(uint64_t v) { little(v); }
  void text(std::string_view s, size_t max_bytes) {
    s = s.substr(0, max_bytes);
    u32(static_cast<uint32_t>(s.size()));
    out_.insert(out_.end(), s.begin(), s.end());
  }
  void bytes(std::span<const uint8_t> b) { out_.insert(out_.end(), b.begin(), b.end()); }
  void i32_array(const std::vector<int32_t>& values) {
    if constexpr (std::endian::native == std::endian::little) {
      const size_t at = out_.size();
      out_.resize(at + values.size() * sizeof(int32_t));
      if (!values.empty()) std::memcpy(out_.data() + at, values.data(), values.size() * 4);
    } else {
      for (int32_t v : values) i32(v);
    }
  }

 private:
  template <typename T>
  void little(T v) {
    for (size_t i = 0; i < sizeof(T); ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::vector<uint8_t>& out_;
};

// Reads little-endian values from a payload; every read is bounds-checked and a short read
// leaves the reader failed (the caller reports which field).
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}
  size_t remaining() const { return in_.size() - at_; }

  bool u8(uint8_t& v) { return little(v); }
  bool u16(uint16_t& v) { return little(v); }
  bool u32(uint32_t& v) { return little(v); }
  bool u64(uint64_t& v) { return little(v); }
  bool i32(int32_t& v) {
    uint32_t u = 0;
    if (!little(u)) return false;
    v = static_cast<int32_t>(u);
    return true;
  }
  bool i64(int64_t& v) {
    uint64_t u = 0;
    if (!little(u)) return false;
    v = static_cast<int64_t>(u);
    return true;
  }
  bool bytes(std::span<uint8_t> out) {
    if (remaining() < out.size()) return false;
    std::copy_n(in_.begin() + static_cast<std::ptrdiff_t>(at_), out.size(), out.begin());
    at_ += out.size();
    return true;
  }
  // PRECONDITION: the caller checked that remaining() holds n values.
  void i32_array(std::vector<int32_t>& values, size_t n) {
    values.resize(n);
    if constexpr (std::endian::native == std::endian::little) {
      if (n > 0) std::memcpy(values.data(), in_.data() + at_, n * sizeof(int32_t));
      at_ += n * sizeof(int32_t);
    } else {
      for (int32_t& v : values) i32(v);
    }
  }
  // A u32 length and that many bytes, at most max_bytes.
  Status text(std::string& out, size_t max_bytes, std::string_view what) {
    uint32_t length = 0;
    if (!u32(length)) {
      return make_error(StatusCode::kInvalidArgument, "{}: the payload ends before its length",
                        what);
    }
    if (length > max_bytes) {
      return make_error(StatusCode::kInvalidArgument, "{}: {} bytes, more than the {} allowed",
                        what, length, max_bytes);
    }
    if (length > remaining()) {
      return make_error(StatusCode::kInvalidArgument,
                        "{}: {} bytes, but the payload holds only {} more", what, length,
                        remaining());
    }
    out.assign(reinterpret_cast<const char*>(in_.data() + at_), length);
    at_ += length;
    return Status::ok();
  }

 private:
  template <typename T>
  bool little(T& v) {
    if (remaining() < sizeof(T)) return false;
    v = 0;
    for (size_t i = 0; i < sizeof(T); ++i)
      v |= static_cast<T>(static_cast<T>(in_[at_ + i]) << (8 * i));
    at_ += sizeof(T);
    return true;
  }
  std::span<const uint8_t> in_;
  size_t at_ = 0;
};

Status truncated(TpMessageKind kind, std::string_view field) {
  return make_error(StatusCode::kInvalidArgument, "{} message: the payload ends before {}",
                    tp_message_kind_name(kind), field);
}

Status out_of_range(TpMessageKind kind, std::string_view field, int64_t value, int64_t min_value,
                    int64_t max_value) {
  return make_error(StatusCode::kInvalidArgument, "{} message: {} = {}, outside [{}, {}]",
                    tp_message_kind_name(kind), field, value, min_value, max_value);
}

bool known_kind(uint16_t kind) {
  return kind >= static_cast<uint16_t>(TpMessageKind::kHello) &&
         kind <= static_cast<uint16_t>(TpMessageKind::kShutdown);
}

// Starts a frame: the header with the checksum left at 0 (finish_frame fills it in).
Writer begin_frame(TpMessageKind kind, uint32_t step, std::vector<uint8_t>& frame) {
  frame.clear();
  Writer w(frame);
  w.u32(kTpMagic);
  w.u16(kTpProtocolVersion);
  w.u16(static_cast<uint16_t>(kind));
  w.u32(step);
  w.u32(0);  // payload_bytes
  w.u32(0);  // checksum
  return w;
}

void put_u32_at(std::vector<uint8_t>& frame, size_t at, uint32_t v) {
  for (size_t i = 0; i < 4; ++i) frame[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

uint32_t frame_checksum(std::span<const uint8_t> header_prefix, std::span<const uint8_t> payload) {
  return tp_crc32(payload, tp_crc32(header_prefix.first(kChecksumOffset)));
}

void finish_frame(std::vector<uint8_t>& frame) {
  const auto payload_bytes = static_cast<uint32_t>(frame.size() - kTpFrameHeaderBytes);
  put_u32_at(frame, 12, payload_bytes);
  const std::span<const uint8_t> all(frame);
  put_u32_at(frame, kChecksumOffset,
             frame_checksum(all.first(kTpFrameHeaderBytes), all.subspan(kTpFrameHeaderBytes)));
}

constexpr int kMaxStatusCode = static_cast<int>(StatusCode::kIo);

Status decode_hello(Reader& r, TpHello& hello) {
  constexpr auto kind = TpMessageKind::kHello;
  if (!r.i32(hello.rank) || !r.i32(hello.world) || !r.u64(hello.model_fingerprint)) {
    return truncated(kind, "rank, world and model fingerprint");
  }
  if (hello.world < 1 || hello.world > kTpMaxWorld) {
    return out_of_range(kind, "world", hello.world, 1, kTpMaxWorld);
  }
  if (hello.rank < 0 || hello.rank >= hello.world) {
    return out_of_range(kind, "rank", hello.rank, 0, hello.world - 1);
  }
  return r.text(hello.origin, kTpMaxOriginBytes, "hello message: origin");
}

Status decode_setup(Reader& r, TpSetup& s) {
  constexpr auto kind = TpMessageKind::kSetup;
  uint8_t graphs = 0;
  uint8_t half_sums = 0;
  uint8_t kv_q8 = 0;
  if (!r.i32(s.kv_block_size) || !r.i32(s.max_batch_tokens) || !r.i32(s.max_seqs) ||
      !r.i64(s.max_context_tokens) || !r.i64(s.kv_capacity_tokens) || !r.i32(s.gemm_min_rows) ||
      !r.i32(s.float_gemm_min_rows) || !r.u8(graphs) || !r.u8(half_sums) || !r.u8(kv_q8)) {
    return truncated(kind, "its last field");
  }
  struct Bound {
    const char* field;
    int64_t value, min_value, max_value;
  };
  for (const Bound& b : {Bound{"kv_block_size", s.kv_block_size, 1, 4096},
                         Bound{"max_batch_tokens", s.max_batch_tokens, 1, 1 << 16},
                         Bound{"max_seqs", s.max_seqs, 1, 1 << 16},
                         Bound{"max_context_tokens", s.max_context_tokens, 0, int64_t{1} << 30},
                         Bound{"kv_capacity_tokens", s.kv_capacity_tokens, 0, int64_t{1} << 40},
                         Bound{"gemm_min_rows", s.gemm_min_rows, 1, 1 << 20},
                         Bound{"float_gemm_min_rows", s.float_gemm_min_rows, 1, 1 << 20},
                         Bound{"cuda_graphs", graphs, 0, 1},
                         Bound{"half_gemm_sums", half_sums, 0, 1}, Bound{"kv_q8_0", kv_q8, 0, 1}}) {
    if (b.value < b.min_value || b.value > b.max_value) {
      return out_of_range(kind, b.field, b.value, b.min_value, b.max_value);
    }
  }
  s.cuda_graphs = graphs != 0;
  s.half_gemm_sums = half_sums != 0;
  s.kv_q8_0 = kv_q8 != 0;
  return Status::ok();
}

Status decode_status(Reader& r, TpMessage& m) {
  constexpr auto kind = TpMessageKind::kStatus;
  int32_t code = 0;
  if (!r.i32(code) || !r.i64(m.value)) return truncated(kind, "code and value");
  if (code < 0 || code > kMaxStatusCode) return out_of_range(kind, "code", code, 0, kMaxStatusCode);
  std::string message;
  LS_RETURN_IF_ERROR(r.text(message, kTpMaxStatusMessageBytes, "status message: text"));
  if ((code == 0) != message.empty()) {
    return make_error(StatusCode::kInvalidArgument,
                      "status message: {} (an ok status has no text, an error has one)",
                      code == 0 ? "ok with a text" : "an error without a text");
  }
  m.status = code == 0 ? Status::ok() : Status(static_cast<StatusCode>(code), std::move(message));
  return Status::ok();
}

Status decode_batch(Reader& r, Batch& b) {
  constexpr auto kind = TpMessageKind::kBatch;
  int32_t n_tokens = 0, n_seqs = 0, n_logit_rows = 0;
  if (!r.i32(n_tokens) || !r.i32(n_seqs) || !r.i32(b.blocks_per_seq) || !r.i32(n_logit_rows)) {
    return truncated(kind, "its counts");
  }
  if (n_tokens < 1 || n_tokens > kTpMaxBatchTokens) {
    return out_of_range(kind, "n_tokens", n_tokens, 1, kTpMaxBatchTokens);
  }
  if (n_seqs < 1 || n_seqs > kTpMaxBatchSeqs) {
    return out_of_range(kind, "n_seqs", n_seqs, 1, kTpMaxBatchSeqs);
  }
  if (b.blocks_per_seq < 1 || b.blocks_per_seq > kTpMaxBatchTokens) {
    return out_of_range(kind, "blocks_per_seq", b.blocks_per_seq, 1, kTpMaxBatchTokens);
  }
  if (n_logit_rows < 0 || n_logit_rows > n_tokens) {
    return out_of_range(kind, "n_logit_rows", n_logit_rows, 0, n_tokens);
  }
  // At most 2^16 x 2^20 table entries: the products stay far inside 64 bits.
  const uint64_t table = static_cast<uint64_t>(n_seqs) * static_cast<uint64_t>(b.blocks_per_seq);
  const uint64_t values = 3ull * static_cast<uint64_t>(n_tokens) + table +
                          static_cast<uint64_t>(n_seqs) + static_cast<uint64_t>(n_logit_rows);
  if (values * sizeof(int32_t) != r.remaining()) {
    return make_error(StatusCode::kInvalidArgument,
                      "batch message: {} tokens, {} sequences x {} blocks and {} logit rows need "
                      "{} bytes of arrays, the payload has {}",
                      n_tokens, n_seqs, b.blocks_per_seq, n_logit_rows, values * sizeof(int32_t),
                      r.remaining());
  }
  const auto n = static_cast<size_t>(n_tokens);
  r.i32_array(b.tokens, n);
  r.i32_array(b.positions, n);
  r.i32_array(b.seq_index, n);
  r.i32_array(b.block_tables, static_cast<size_t>(table));
  r.i32_array(b.seq_lengths, static_cast<size_t>(n_seqs));
  r.i32_array(b.logit_rows, static_cast<size_t>(n_logit_rows));
  return Status::ok();
}

}  // namespace

const char* tp_message_kind_name(TpMessageKind kind) {
  switch (kind) {
    case TpMessageKind::kHello: return "hello";
    case TpMessageKind::kSetup: return "setup";
    case TpMessageKind::kStatus: return "status";
    case TpMessageKind::kStart: return "start";
    case TpMessageKind::kCommId: return "comm id";
    case TpMessageKind::kBatch: return "batch";
    case TpMessageKind::kShutdown: return "shutdown";
  }
  return "unknown";
}

uint32_t tp_crc32(std::span<const uint8_t> bytes, uint32_t crc) {
  crc = ~crc;
  for (uint8_t b : bytes) crc = kCrcTable[(crc ^ b) & 0xff] ^ (crc >> 8);
  return ~crc;
}

void encode_hello(const TpHello& hello, std::vector<uint8_t>& frame) {
  Writer w = begin_frame(TpMessageKind::kHello, 0, frame);
  w.i32(hello.rank);
  w.i32(hello.world);
  w.u64(hello.model_fingerprint);
  w.text(hello.origin, kTpMaxOriginBytes);
  finish_frame(frame);
}

void encode_setup(const TpSetup& s, std::vector<uint8_t>& frame) {
  Writer w = begin_frame(TpMessageKind::kSetup, 0, frame);
  w.i32(s.kv_block_size);
  w.i32(s.max_batch_tokens);
  w.i32(s.max_seqs);
  w.i64(s.max_context_tokens);
  w.i64(s.kv_capacity_tokens);
  w.i32(s.gemm_min_rows);
  w.i32(s.float_gemm_min_rows);
  w.u8(s.cuda_graphs ? 1 : 0);
  w.u8(s.half_gemm_sums ? 1 : 0);
  w.u8(s.kv_q8_0 ? 1 : 0);
  finish_frame(frame);
}

void encode_status(uint32_t step, const Status& status, int64_t value,
                   std::vector<uint8_t>& frame) {
  Writer w = begin_frame(TpMessageKind::kStatus, step, frame);
  w.i32(static_cast<int32_t>(status.code()));
  w.i64(value);
  if (status.is_ok()) {
    w.text("", 0);
  } else {
    w.text(status.message().empty() ? std::string_view("(no message)") : status.message(),
           kTpMaxStatusMessageBytes);
  }
  finish_frame(frame);
}

void encode_start(int32_t kv_blocks, std::vector<uint8_t>& frame) {
  Writer w = begin_frame(TpMessageKind::kStart, 0, frame);
  w.i32(kv_blocks);
  finish_frame(frame);
}

void encode_comm_id(const TpCommId& id, std::vector<uint8_t>& frame) {
  Writer w = begin_frame(TpMessageKind::kCommId, 0, frame);
  w.bytes(id);
  finish_frame(frame);
}

void encode_shutdown(std::vector<uint8_t>& frame) {
  begin_frame(TpMessageKind::kShutdown, 0, frame);
  finish_frame(frame);
}

Status encode_batch(uint32_t step, const Batch& b, std::vector<uint8_t>& frame) {
  const size_t n = b.tokens.size(), n_seqs = b.seq_lengths.size();
  if (n < 1 || n > static_cast<size_t>(kTpMaxBatchTokens) || n_seqs < 1 ||
      n_seqs > static_cast<size_t>(kTpMaxBatchSeqs) || b.blocks_per_seq < 1 ||
      b.blocks_per_seq > kTpMaxBatchTokens || b.logit_rows.size() > n) {
    return make_error(StatusCode::kInvalidArgument,
                      "batch of {} tokens, {} sequences, {} blocks per sequence and {} logit rows: "
                      "outside what a tensor-parallel frame carries ([1, {}] tokens, [1, {}] "
                      "sequences, [1, {}] blocks, no more logit rows than tokens)",
                      n, n_seqs, b.blocks_per_seq, b.logit_rows.size(), kTpMaxBatchTokens,
                      kTpMaxBatchSeqs, kTpMaxBatchTokens);
  }
  if (b.positions.size() != n || b.seq_index.size() != n ||
      b.block_tables.size() != n_seqs * static_cast<size_t>(b.blocks_per_seq)) {
    return make_error(StatusCode::kInvalidArgument,
                      "batch arrays disagree: {} tokens, {} positions, {} sequence indices, {} "
                      "block table entries for {} sequences x {} blocks",
                      n, b.positions.size(), b.seq_index.size(), b.block_tables.size(), n_seqs,
                      b.blocks_per_seq);
  }
  const size_t payload = kBatchCountsBytes + sizeof(int32_t) * (3 * n + b.block_tables.size() +
                                                                n_seqs + b.logit_rows.size());
  if (payload > kTpMaxPayloadBytes) {
    return make_error(StatusCode::kInvalidArgument,
                      "batch of {} bytes exceeds the {} MiB limit of a tensor-parallel frame",
                      payload, kTpMaxPayloadBytes >> 20);
  }
  Writer w = begin_frame(TpMessageKind::kBatch, step, frame);
  frame.reserve(kTpFrameHeaderBytes + payload);
  w.i32(static_cast<int32_t>(n));
  w.i32(static_cast<int32_t>(n_seqs));
  w.i32(b.blocks_per_seq);
  w.i32(static_cast<int32_t>(b.logit_rows.size()));
  w.i32_array(b.tokens);
  w.i32_array(b.positions);
  w.i32_array(b.seq_index);
  w.i32_array(b.block_tables);
  w.i32_array(b.seq_lengths);
  w.i32_array(b.logit_rows);
  finish_frame(frame);
  return Status::ok();
}

Status encode_message(const TpMessage& m, std::vector<uint8_t>& frame) {
  switch (m.kind) {
    case TpMessageKind::kHello: encode_hello(m.hello, frame); return Status::ok();
    case TpMessageKind::kSetup: encode_setup(m.setup, frame); return Status::ok();
    case TpMessageKind::kStatus:
      encode_status(m.step, m.status, m.value, frame);
      return Status::ok();
    case TpMessageKind::kStart: encode_start(m.kv_blocks, frame); return Status::ok();
    case TpMessageKind::kCommId: encode_comm_id(m.comm_id, frame); return Status::ok();
    case TpMessageKind::kBatch: return encode_batch(m.step, m.batch, frame);
    case TpMessageKind::kShutdown: encode_shutdown(frame); return Status::ok();
  }
  return make_error(StatusCode::kInvalidArgument, "unknown message kind {}",
                    static_cast<int>(m.kind));
}

Result<TpFrameHeader> decode_frame_header(std::span<const uint8_t> bytes) {
  if (bytes.size() < kTpFrameHeaderBytes) {
    return make_error(StatusCode::kInvalidArgument, "frame header of {} bytes, expected {}",
                      bytes.size(), kTpFrameHeaderBytes);
  }
  Reader r(bytes.first(kTpFrameHeaderBytes));
  uint32_t magic = 0;
  uint16_t kind = 0;
  TpFrameHeader h;
  r.u32(magic);
  r.u16(h.version);
  r.u16(kind);
  r.u32(h.step);
  r.u32(h.payload_bytes);
  r.u32(h.checksum);
  if (magic != kTpMagic) {
    return make_error(StatusCode::kInvalidArgument,
                      "not a llamaserve tensor-parallel frame (magic {:#010x}, expected {:#010x})",
                      magic, kTpMagic);
  }
  if (h.version != kTpProtocolVersion) {
    return make_error(StatusCode::kInvalidArgument,
                      "the peer speaks tensor-parallel protocol version {}, this build speaks {}: "
                      "run the same llamaserve build on every rank",
                      h.version, kTpProtocolVersion);
  }
  if (!known_kind(kind)) {
    return make_error(StatusCode::kInvalidArgument, "frame of unknown kind {}", kind);
  }
  h.kind = static_cast<TpMessageKind>(kind);
  if (h.payload_bytes > kTpMaxPayloadBytes) {
    return make_error(StatusCode::kInvalidArgument,
                      "{} frame announces {} bytes of payload, more than the {} MiB limit",
                      tp_message_kind_name(h.kind), h.payload_bytes, kTpMaxPayloadBytes >> 20);
  }
  return h;
}

Status decode_frame_payload(const TpFrameHeader& h, std::span<const uint8_t> payload,
                            TpMessage& m) {
  if (payload.size() != h.payload_bytes) {
    return make_error(StatusCode::kInvalidArgument, "{} frame: {} bytes of payload, header says {}",
                      tp_message_kind_name(h.kind), payload.size(), h.payload_bytes);
  }
  // The checksum covers the header as it was sent; rebuild its bytes from the fields.
  std::vector<uint8_t> header;
  Writer w(header);
  w.u32(kTpMagic);
  w.u16(h.version);
  w.u16(static_cast<uint16_t>(h.kind));
  w.u32(h.step);
  w.u32(h.payload_bytes);
  const uint32_t checksum = frame_checksum(header, payload);
  if (checksum != h.checksum) {
    return make_error(StatusCode::kInvalidArgument,
                      "{} frame of step {}: checksum {:#010x}, the bytes give {:#010x} (corrupted "
                      "in transit)",
                      tp_message_kind_name(h.kind), h.step, h.checksum, checksum);
  }
  // Only the messages of a step carry one: any other frame is sent with step 0.
  if (h.step != 0 && h.kind != TpMessageKind::kStatus && h.kind != TpMessageKind::kBatch) {
    return make_error(StatusCode::kInvalidArgument, "{} frame of step {}: it carries no step",
                      tp_message_kind_name(h.kind), h.step);
  }
  Reader r(payload);
  Status status;
  switch (h.kind) {
    case TpMessageKind::kHello: status = decode_hello(r, m.hello); break;
    case TpMessageKind::kSetup: status = decode_setup(r, m.setup); break;
    case TpMessageKind::kStatus: status = decode_status(r, m); break;
    case TpMessageKind::kStart:
      if (!r.i32(m.kv_blocks)) {
        status = truncated(h.kind, "kv_blocks");
      } else if (m.kv_blocks < 1 || m.kv_blocks > (1 << 30)) {
        status = out_of_range(h.kind, "kv_blocks", m.kv_blocks, 1, 1 << 30);
      }
      break;
    case TpMessageKind::kCommId:
      if (!r.bytes(m.comm_id)) status = truncated(h.kind, "the 128-byte id");
      break;
    case TpMessageKind::kBatch: status = decode_batch(r, m.batch); break;
    case TpMessageKind::kShutdown: break;
  }
  LS_RETURN_IF_ERROR(status);
  if (r.remaining() != 0) {
    return make_error(StatusCode::kInvalidArgument, "{} message: {} bytes left over after it",
                      tp_message_kind_name(h.kind), r.remaining());
  }
  m.kind = h.kind;
  m.step = h.step;
  return Status::ok();
}

Status decode_frame(std::span<const uint8_t> frame, TpMessage& message) {
  LS_ASSIGN_OR_RETURN(const TpFrameHeader header, decode_frame_header(frame));
  return decode_frame_payload(header, frame.subspan(kTpFrameHeaderBytes), message);
}

}  // namespace llamaserve
