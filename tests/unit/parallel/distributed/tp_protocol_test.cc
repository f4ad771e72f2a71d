// The tensor-parallel frames: every kind survives encode -> decode -> encode byte for byte, and
// every malformed frame (another protocol, another version, a flipped bit, a short or long
// payload, counts that disagree with the payload, values out of range) is refused with a
// message naming what is wrong.
#include "parallel/distributed/tp_protocol.h"

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace llamaserve {
namespace {

#define EXPECT_ERROR_HAS(status_expr, text)                                  \
  do {                                                                       \
    const Status s_ = (status_expr);                                         \
    EXPECT_FALSE(s_.is_ok()) << "expected an error containing: " << (text);  \
    EXPECT_NE(s_.message().find(text), std::string::npos) << s_.to_string(); \
  } while (0)

// Two sequences: 3 prefill rows of sequence 0, one decode row of sequence 1; tables of 4
// entries with unused tails.
Batch sample_batch() {
  Batch b;
  b.tokens = {11, 12, 13, 7};
  b.positions = {0, 1, 2, 40};
  b.seq_index = {0, 0, 0, 1};
  b.blocks_per_seq = 4;
  b.block_tables = {5, -1, -1, -1, 9, 10, 11, -1};
  b.seq_lengths = {3, 41};
  b.logit_rows = {2, 3};
  return b;
}

std::vector<uint8_t> round_trip(const std::vector<uint8_t>& frame, TpMessage& decoded) {
  const Status status = decode_frame(frame, decoded);
  EXPECT_TRUE(status.is_ok()) << status.to_string();
  std::vector<uint8_t> again;
  const Status encoded = encode_message(decoded, again);
  EXPECT_TRUE(encoded.is_ok()) << encoded.to_string();
  return again;
}

void put_u32(std::vector<uint8_t>& frame, size_t at, uint32_t v) {
  for (size_t i = 0; i < 4; ++i) frame[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

// After editing a frame's bytes on purpose: a valid checksum again, so that the decoder gets
// past it to the check under test.
void reseal(std::vector<uint8_t>& frame) {
  put_u32(frame, 12, static_cast<uint32_t>(frame.size() - kTpFrameHeaderBytes));
  const std::span<const uint8_t> all(frame);
  put_u32(frame, 16, tp_crc32(all.subspan(kTpFrameHeaderBytes), tp_crc32(all.first(16))));
}

TEST(TpProtocolTest, Crc32IsTheStandardOne) {
  const std::string check = "123456789";
  EXPECT_EQ(tp_crc32({reinterpret_cast<const uint8_t*>(check.data()), check.size()}), 0xCBF43926u);
  const auto* bytes = reinterpret_cast<const uint8_t*>(check.data());
  EXPECT_EQ(tp_crc32({bytes + 4, 5}, tp_crc32({bytes, 4})), 0xCBF43926u);  // continues
}

TEST(TpProtocolTest, EveryKindRoundTrips) {
  std::vector<uint8_t> frame;
  TpMessage m;

  encode_hello({3, 4, 0x0123456789abcdefull, "host-a pid 77 cuda:3"}, frame);
  EXPECT_EQ(round_trip(frame, m), frame);
  EXPECT_EQ(m.kind, TpMessageKind::kHello);
  EXPECT_EQ(m.hello.rank, 3);
  EXPECT_EQ(m.hello.world, 4);
  EXPECT_EQ(m.hello.model_fingerprint, 0x0123456789abcdefull);
  EXPECT_EQ(m.hello.origin, "host-a pid 77 cuda:3");

  TpSetup setup;
  setup.kv_block_size = 32;
  setup.max_batch_tokens = 64;
  setup.max_seqs = 16;
  setup.max_context_tokens = 512;
  setup.kv_capacity_tokens = 1536;
  setup.gemm_min_rows = 9;
  setup.float_gemm_min_rows = 3;
  setup.cuda_graphs = false;
  setup.half_gemm_sums = false;
  setup.kv_q8_0 = true;
  encode_setup(setup, frame);
  EXPECT_EQ(round_trip(frame, m), frame);
  EXPECT_EQ(m.kind, TpMessageKind::kSetup);
  EXPECT_EQ(m.setup, setup);

  encode_status(17, Status(StatusCode::kResourceExhausted, "no memory on cuda:1"), -5, frame);
  EXPECT_EQ(round_trip(frame, m), frame);
  EXPECT_EQ(m.kind, TpMessageKind::kStatus);
  EXPECT_EQ(m.step, 17u);
  EXPECT_EQ(m.value, -5);
  EXPECT_EQ(m.status.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(m.status.message(), "no memory on cuda:1");

  encode_status(0, Status::ok(), 1234, frame);
  EXPECT_EQ(round_trip(frame, m), frame);
  EXPECT_TRUE(m.status.is_ok());
  EXPECT_EQ(m.value, 1234);

  encode_start(96, frame);
  EXPECT_EQ(round_trip(frame, m), frame);
  EXPECT_EQ(m.kind, TpMessageKind::kStart);
  EXPECT_EQ(m.kv_blocks, 96);

  TpCommId id;
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<uint8_t>(i * 37 + 1);
  encode_comm_id(id, frame);
  EXPECT_EQ(round_trip(frame, m), frame);
  EXPECT_EQ(m.kind, TpMessageKind::kCommId);
  EXPECT_EQ(m.comm_id, id);

  const Batch batch = sample_batch();
  ASSERT_TRUE(encode_batch(42, batch, frame).is_ok());
  EXPECT_EQ(round_trip(frame, m), frame);
  EXPECT_EQ(m.kind, TpMessageKind::kBatch);
  EXPECT_EQ(m.step, 42u);
  EXPECT_EQ(m.batch.tokens, batch.tokens);
  EXPECT_EQ(m.batch.positions, batch.positions);
  EXPECT_EQ(m.batch.seq_index, batch.seq_index);
  EXPECT_EQ(m.batch.blocks_per_seq, batch.blocks_per_seq);
  EXPECT_EQ(m.batch.block_tables, batch.block_tables);
  EXPECT_EQ(m.batch.seq_lengths, batch.seq_lengths);
  EXPECT_EQ(m.batch.logit_rows, batch.logit_rows);

  encode_shutdown(frame);
  EXPECT_EQ(frame.size(), kTpFrameHeaderBytes);
  EXPECT_EQ(round_trip(frame, m), frame);
  EXPECT_EQ(m.kind, TpMessageKind::kShutdown);
}

TEST(TpProtocolTest, DecodingIntoAReusedMessageReplacesTheBatch) {
  TpMessage m;
  std::vector<uint8_t> frame;
  Batch big = sample_batch();
  ASSERT_TRUE(encode_batch(1, big, frame).is_ok());
  ASSERT_TRUE(decode_frame(frame, m).is_ok());
  Batch small;
  small.tokens = {1};
  small.positions = {0};
  small.seq_index = {0};
  small.blocks_per_seq = 1;
  small.block_tables = {0};
  small.seq_lengths = {1};
  ASSERT_TRUE(encode_batch(2, small, frame).is_ok());
  ASSERT_TRUE(decode_frame(frame, m).is_ok());
  EXPECT_EQ(m.batch.tokens, small.tokens);
  EXPECT_EQ(m.batch.block_tables, small.block_tables);
  EXPECT_TRUE(m.batch.logit_rows.empty());
}

TEST(TpProtocolTest, EncoderCutsLongTextsAndNamesAnonymousErrors) {
  std::vector<uint8_t> frame;
  TpMessage m;
  encode_hello({1, 2, 0, std::string(1000, 'x')}, frame);
  ASSERT_TRUE(decode_frame(frame, m).is_ok());
  EXPECT_EQ(m.hello.origin.size(), kTpMaxOriginBytes);
  encode_status(0, Status(StatusCode::kInternal, ""), 0, frame);
  ASSERT_TRUE(decode_frame(frame, m).is_ok());
  EXPECT_FALSE(m.status.message().empty());
}

TEST(TpProtocolTest, EncoderRefusesBatchesItCannotCarry) {
  std::vector<uint8_t> frame;
  Batch b = sample_batch();
  b.positions.pop_back();
  EXPECT_ERROR_HAS(encode_batch(1, b, frame), "batch arrays disagree: 4 tokens, 3 positions");
  b = sample_batch();
  b.block_tables.push_back(0);
  EXPECT_ERROR_HAS(encode_batch(1, b, frame), "9 block table entries for 2 sequences x 4 blocks");
  b = sample_batch();
  b.logit_rows = {0, 1, 2, 3, 3};
  EXPECT_ERROR_HAS(encode_batch(1, b, frame), "no more logit rows than tokens");
  EXPECT_ERROR_HAS(encode_batch(1, Batch(), frame), "outside what a tensor-parallel frame carries");
  // 2^16 sequences of 2^8 blocks: 64 MiB of tables, over the frame limit.
  b = Batch();
  b.tokens = {1};
  b.positions = {0};
  b.seq_index = {0};
  b.blocks_per_seq = 1 << 8;
  b.seq_lengths.assign(1 << 16, 1);
  b.block_tables.assign(static_cast<size_t>(1) << 24, 0);
  EXPECT_ERROR_HAS(encode_batch(1, b, frame), "exceeds the 64 MiB limit");
}

TEST(TpProtocolTest, HeaderErrorsNameTheProblem) {
  std::vector<uint8_t> frame;
  encode_start(5, frame);
  TpMessage m;

  std::vector<uint8_t> http(frame.size(), 0);
  std::memcpy(http.data(), "GET / HTTP/1.1\r\n", 16);
  EXPECT_ERROR_HAS(decode_frame(http, m), "not a llamaserve tensor-parallel frame");

  std::vector<uint8_t> v2 = frame;
  v2[4] = 2;
  EXPECT_ERROR_HAS(decode_frame(v2, m), "protocol version 2, this build speaks 3");

  std::vector<uint8_t> kind = frame;
  kind[6] = 99;
  EXPECT_ERROR_HAS(decode_frame(kind, m), "unknown kind 99");

  std::vector<uint8_t> huge = frame;
  put_u32(huge, 12, kTpMaxPayloadBytes + 1);
  EXPECT_ERROR_HAS(decode_frame(huge, m), "more than the 64 MiB limit");

  EXPECT_ERROR_HAS(decode_frame(std::span(frame).first(7), m), "frame header of 7 bytes");
}

TEST(TpProtocolTest, CorruptedOrTruncatedFramesAreRefused) {
  std::vector<uint8_t> frame;
  ASSERT_TRUE(encode_batch(9, sample_batch(), frame).is_ok());
  TpMessage m;
  for (const size_t at : {kTpFrameHeaderBytes + 3, frame.size() - 1, size_t{8}}) {
    std::vector<uint8_t> flipped = frame;
    flipped[at] ^= 0x10;  // a payload byte, the last one, the step in the header
    SCOPED_TRACE(at);
    EXPECT_ERROR_HAS(decode_frame(flipped, m), "checksum");
  }
  EXPECT_ERROR_HAS(decode_frame(std::span(frame).first(frame.size() - 4), m),
                   "bytes of payload, header says");
  std::vector<uint8_t> longer = frame;
  longer.push_back(0);
  EXPECT_ERROR_HAS(decode_frame(longer, m), "bytes of payload, header says");
  // A step on a frame that carries none (found by tp_message_fuzz: it would not re-encode
  // to the same bytes), resealed so that only the step is wrong.
  std::vector<uint8_t> shutdown;
  encode_shutdown(shutdown);
  put_u32(shutdown, 8, 0x80000000u);
  reseal(shutdown);
  EXPECT_ERROR_HAS(decode_frame(shutdown, m),
                   "shutdown frame of step 2147483648: it carries no step");
}

TEST(TpProtocolTest, PayloadsThatDisagreeWithTheirCountsAreRefused) {
  std::vector<uint8_t> frame;
  ASSERT_TRUE(encode_batch(9, sample_batch(), frame).is_ok());
  TpMessage m;
  const size_t counts = kTpFrameHeaderBytes;

  std::vector<uint8_t> more_tokens = frame;
  put_u32(more_tokens, counts, 5);
  reseal(more_tokens);
  EXPECT_ERROR_HAS(decode_frame(more_tokens, m),
                   "5 tokens, 2 sequences x 4 blocks and 2 logit "
                   "rows need");
  std::vector<uint8_t> no_tokens = frame;
  put_u32(no_tokens, counts, 0);
  reseal(no_tokens);
  EXPECT_ERROR_HAS(decode_frame(no_tokens, m), "n_tokens = 0, outside [1, 1048576]");
  std::vector<uint8_t> negative_blocks = frame;
  put_u32(negative_blocks, counts + 8, static_cast<uint32_t>(-1));
  reseal(negative_blocks);
  EXPECT_ERROR_HAS(decode_frame(negative_blocks, m), "blocks_per_seq = -1");
  std::vector<uint8_t> many_logits = frame;
  put_u32(many_logits, counts + 12, 5);
  reseal(many_logits);
  EXPECT_ERROR_HAS(decode_frame(many_logits, m), "n_logit_rows = 5, outside [0, 4]");
  // Counts whose product would overflow 32 bits still only describe what the payload holds.
  std::vector<uint8_t> vast = frame;
  put_u32(vast, counts + 4, 1 << 16);
  put_u32(vast, counts + 8, 1 << 20);
  reseal(vast);
  EXPECT_ERROR_HAS(decode_frame(vast, m), "need 274878169144 bytes of arrays, the payload has");
  std::vector<uint8_t> cut = frame;
  cut.resize(kTpFrameHeaderBytes + 10);
  reseal(cut);
  EXPECT_ERROR_HAS(decode_frame(cut, m), "batch message: the payload ends before its counts");
}

TEST(TpProtocolTest, FieldsOutsideTheirRangesAreRefused) {
  std::vector<uint8_t> frame;
  TpMessage m;
  encode_hello({2, 2, 0, "x"}, frame);
  EXPECT_ERROR_HAS(decode_frame(frame, m), "rank = 2, outside [0, 1]");
  encode_hello({0, 0, 0, "x"}, frame);
  EXPECT_ERROR_HAS(decode_frame(frame, m), "world = 0, outside [1, 1024]");

  TpSetup setup;
  setup.kv_block_size = 0;
  encode_setup(setup, frame);
  EXPECT_ERROR_HAS(decode_frame(frame, m), "kv_block_size = 0, outside [1, 4096]");
  setup = TpSetup();
  setup.max_batch_tokens = 1 << 17;
  encode_setup(setup, frame);
  EXPECT_ERROR_HAS(decode_frame(frame, m), "max_batch_tokens = 131072");
  encode_setup(TpSetup(), frame);
  frame[frame.size() - 3] = 2;  // cuda_graphs
  reseal(frame);
  EXPECT_ERROR_HAS(decode_frame(frame, m), "cuda_graphs = 2, outside [0, 1]");
  encode_setup(TpSetup(), frame);
  frame[frame.size() - 2] = 2;  // half_gemm_sums
  reseal(frame);
  EXPECT_ERROR_HAS(decode_frame(frame, m), "half_gemm_sums = 2, outside [0, 1]");
  encode_setup(TpSetup(), frame);
  frame.back() = 2;  // kv_q8_0
  reseal(frame);
  EXPECT_ERROR_HAS(decode_frame(frame, m), "kv_q8_0 = 2, outside [0, 1]");

  encode_start(0, frame);
  EXPECT_ERROR_HAS(decode_frame(frame, m), "kv_blocks = 0");

  encode_status(0, Status::ok(), 0, frame);
  std::vector<uint8_t> ok_with_text = frame;
  put_u32(ok_with_text, ok_with_text.size() - 4, 1);
  ok_with_text.push_back('!');
  reseal(ok_with_text);
  EXPECT_ERROR_HAS(decode_frame(ok_with_text, m), "ok with a text");
  std::vector<uint8_t> error_without_text = frame;
  put_u32(error_without_text, kTpFrameHeaderBytes, 3);
  reseal(error_without_text);
  EXPECT_ERROR_HAS(decode_frame(error_without_text, m), "an error without a text");
  std::vector<uint8_t> unknown_code = frame;
  put_u32(unknown_code, kTpFrameHeaderBytes, 77);
  reseal(unknown_code);
  EXPECT_ERROR_HAS(decode_frame(unknown_code, m), "code = 77, outside [0, 10]");
  std::vector<uint8_t> long_text = frame;
  put_u32(long_text, long_text.size() - 4, 5000);
  long_text.resize(long_text.size() + 5000, 'a');
  reseal(long_text);
  EXPECT_ERROR_HAS(decode_frame(long_text, m), "5000 bytes, more than the 4096 allowed");
  std::vector<uint8_t> short_text = frame;
  put_u32(short_text, short_text.size() - 4, 10);
  reseal(short_text);
  EXPECT_ERROR_HAS(decode_frame(short_text, m), "10 bytes, but the payload holds only 0 more");

  encode_comm_id(TpCommId{}, frame);
  frame.resize(frame.size() - 1);
  reseal(frame);
  EXPECT_ERROR_HAS(decode_frame(frame, m), "comm id message: the payload ends before");

  encode_shutdown(frame);
  frame.push_back(0);
  reseal(frame);
  EXPECT_ERROR_HAS(decode_frame(frame, m), "shutdown message: 1 bytes left over");
}

}  // namespace
}  // namespace llamaserve
