// The messages between the ranks of a tensor-parallel group whose ranks are processes
// (rendezvous.h carries them over TCP): what each holds, and its bytes. No sockets here, so
// that the decoder, which reads whatever arrives on the port, is fuzzed on its own
// (tests/fuzz/tp_message_fuzz.cc).
//
// A frame is a 20-byte header and a payload; every integer is little-endian:
//   u32 magic "LSTP" | u16 version | u16 kind | u32 step | u32 payload_bytes |
//   u32 checksum (CRC-32 of the header's first 16 bytes, then of the payload)
// (the step is 0 except in status and batch frames)
// then the payload of the kind:
//   hello     i32 rank | i32 world | u64 model fingerprint | text origin
//   setup     i32 kv_block_size | i32 max_batch_tokens | i32 max_seqs | i64 max_context_tokens |
//             i64 kv_capacity_tokens | i32 gemm_min_rows | i32 float_gemm_min_rows |
//             u8 cuda_graphs | u8 half_gemm_sums | u8 kv_q8_0
//   status    i32 status code (0: ok) | i64 value | text message (empty exactly when ok)
//   start     i32 kv_blocks
//   comm id   128 bytes (an ncclUniqueId, opaque here)
//   batch     i32 n_tokens | i32 n_seqs | i32 blocks_per_seq | i32 n_logit_rows |
//             i32 tokens[n_tokens] | i32 positions[n_tokens] | i32 seq_index[n_tokens] |
//             i32 block_tables[n_seqs * blocks_per_seq] | i32 seq_lengths[n_seqs] |
//             i32 logit_rows[n_logit_rows]
//   shutdown  (empty)
// where text is u32 length + UTF-8 bytes. The decoder checks the frame (magic, version, a known
// kind, the length bound, the checksum) and each payload's counts and ranges against its exact
// length; what a batch's values mean (token ids within the vocabulary, block ids within the
// cache) is validate_batch's job on the receiving rank, which knows the geometry.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/batch.h"
#include "core/status.h"

namespace llamaserve {

inline constexpr uint32_t kTpMagic = 0x5054534c;  // "LSTP" in little-endian byte order
inline constexpr uint16_t kTpProtocolVersion = 3;
inline constexpr size_t kTpFrameHeaderBytes = 20;
// A batch of 256 sequences with 8192-entry block tables is 8 MiB; nothing legitimate nears this.
inline constexpr uint32_t kTpMaxPayloadBytes = 64u << 20;
inline constexpr int32_t kTpMaxWorld = 1024;
inline constexpr size_t kTpMaxOriginBytes = 256;
inline constexpr size_t kTpMaxStatusMessageBytes = 4096;
inline constexpr int32_t kTpMaxBatchTokens = 1 << 20;
inline constexpr int32_t kTpMaxBatchSeqs = 1 << 16;
inline constexpr size_t kTpCommIdBytes = 128;

enum class TpMessageKind : uint16_t {
  kHello = 1,  // rank r -> rank 0: who is joining
  kSetup,      // rank 0 -> rank r: what every rank's part must share
  kStatus,     // either way: the outcome of a phase or a step (or why rank 0 gave up)
  kStart,      // rank 0 -> rank r: the KV block count every rank allocates
  kCommId,     // rank 0 -> rank r: the NCCL unique id
  kBatch,      // rank 0 -> rank r: one step's work
  kShutdown,   // rank 0 -> rank r: free the GPU and exit
};

const char* tp_message_kind_name(TpMessageKind kind);

struct TpHello {
  int32_t rank = 0;
  int32_t world = 0;
  uint64_t model_fingerprint = 0;  // model_fingerprint.h
  std::string origin;              // for logs: "host pid 1234 cuda:1"
};

// The options of a rank's part (CudaExecutorOptions) that must be the same on every rank: the
// block size and table width give block ids one meaning, and the pass limits make every rank
// cut a batch into the same pieces and pad them alike, so that their all-reduces pair up.
struct TpSetup {
  int32_t kv_block_size = 16;
  int32_t max_batch_tokens = 2048;
  int32_t max_seqs = 256;
  int64_t max_context_tokens = 0;
  int64_t kv_capacity_tokens = 0;
  int32_t gemm_min_rows = 5;  // CudaExecutorOptions' defaults
  int32_t float_gemm_min_rows = 5;
  bool cuda_graphs = true;
  // The partials of the GEMM output projections are summed as halves (TpSums::half_gemm_sums,
  // RankSumSetup::half_gemm_sums): every rank's all-reduces must carry the same type.
  bool half_gemm_sums = true;
  // The KV cache holds Q8_0 instead of f16 (CudaExecutorOptions::kv_type): every rank's share
  // of the KV heads alike, so that the ranks' block counts from one budget agree.
  bool kv_q8_0 = false;

  bool operator==(const TpSetup&) const = default;
};

using TpCommId = std::array<uint8_t, kTpCommIdBytes>;

struct TpFrameHeader {
  uint16_t version = kTpProtocolVersion;
  TpMessageKind kind = TpMessageKind::kShutdown;
  uint32_t step = 0;
  uint32_t payload_bytes = 0;
  uint32_t checksum = 0;
};

// One decoded message: `kind` and `step`, and the body of that kind. The other bodies keep
// whatever they held, so that a receiver reusing one TpMessage reuses the batch's vectors.
struct TpMessage {
  TpMessageKind kind = TpMessageKind::kShutdown;
  uint32_t step = 0;
  TpHello hello;          // kHello
  TpSetup setup;          // kSetup
  Status status;          // kStatus
  int64_t value = 0;      // kStatus: what the phase reports (the KV blocks a rank can hold)
  int32_t kv_blocks = 0;  // kStart
  TpCommId comm_id{};     // kCommId
  Batch batch;            // kBatch
};

// CRC-32 (IEEE 802.3, reflected, as zlib computes it), continuing from `crc`.
uint32_t tp_crc32(std::span<const uint8_t> bytes, uint32_t crc = 0);

// Encoders: each replaces `frame` with one whole frame. Texts longer than their bound are
// cut to it; an error status without a message gets one.
void encode_hello(const TpHello& hello, std::vector<uint8_t>& frame);
void encode_setup(const TpSetup& setup, std::vector<uint8_t>& frame);
void encode_status(uint32_t step, const Status& status, int64_t value, std::vector<uint8_t>& frame);
void encode_start(int32_t kv_blocks, std::vector<uint8_t>& frame);
void encode_comm_id(const TpCommId& id, std::vector<uint8_t>& frame);
void encode_shutdown(std::vector<uint8_t>& frame);
// Errors: array sizes that disagree with n_tokens / n_seqs / blocks_per_seq, counts past the
// decoder's bounds, or a frame above kTpMaxPayloadBytes (kInvalidArgument, naming them).
Status encode_batch(uint32_t step, const Batch& batch, std::vector<uint8_t>& frame);
// The encoder of message.kind with message's body.
Status encode_message(const TpMessage& message, std::vector<uint8_t>& frame);

// The first kTpFrameHeaderBytes of a frame. Errors (kInvalidArgument): not this protocol (the
// magic), another protocol version (naming both), an unknown kind, a payload above
// kTpMaxPayloadBytes.
Result<TpFrameHeader> decode_frame_header(std::span<const uint8_t> header);

// Checks `payload` against the header's length and checksum and decodes it into `message`.
// Errors (kInvalidArgument) name the kind, the field and what was expected.
Status decode_frame_payload(const TpFrameHeader& header, std::span<const uint8_t> payload,
                            TpMessage& message);

// A whole frame, header and payload, with nothing after it.
Status decode_frame(std::span<const uint8_t> frame, TpMessage& message);

}  // namespace llamaserve
