// libFuzzer target for the tensor-parallel frames (parallel/tp_protocol.h): what arrives on rank
// 0's rendezvous port and on every other rank's connection, from whoever can reach them. The
// input is read as a stream of frames, as TpConnection reads it: a header, then the payload it
// announces, into one reused TpMessage. Besides "never crash, never allocate beyond the frame
// limit", it checks:
//   - a refused header or payload gives kInvalidArgument with a message;
//   - an accepted frame encodes back to exactly its own bytes (the decoder accepts nothing the
//     encoder could not have written, and loses nothing);
//   - an accepted batch has arrays of the sizes its counts say, and validate_batch, which a
//     rank applies before its kernels read the batch, returns (ok or an error) on it.
// A violated property aborts, which libFuzzer reports as a crash with the input saved.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <vector>

#include "executor/batch_validation.h"
#include "parallel/distributed/tp_protocol.h"

namespace llamaserve {
namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "tp_message_fuzz property violated: %s\n", what);
  std::abort();
}

void check(bool condition, const char* what) {
  if (!condition) fail(what);
}

void check_refusal(const Status& status) {
  check(status.code() == StatusCode::kInvalidArgument, "a bad frame is not kInvalidArgument");
  check(!status.message().empty(), "error without a message");
}

void check_batch(const Batch& b) {
  const size_t n = b.tokens.size();
  check(n >= 1 && b.positions.size() == n && b.seq_index.size() == n, "batch row arrays");
  check(b.block_tables.size() == b.seq_lengths.size() * static_cast<size_t>(b.blocks_per_seq),
        "batch block tables");
  check(b.logit_rows.size() <= n, "batch logit rows");
  // The geometry of a small cache; what matters is that the check returns.
  const KvCacheInfo kv{64, 16, 4096};
  const Status valid = validate_batch(b, kv, 1000, b.logit_rows.size() * 1000);
  check(valid.is_ok() || !valid.message().empty(), "batch refusal without a message");
}

}  // namespace
}  // namespace llamaserve

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace llamaserve;
  std::span<const uint8_t> input(data, size);
  TpMessage message;
  std::vector<uint8_t> again;
  while (input.size() >= kTpFrameHeaderBytes) {
    auto header = decode_frame_header(input.first(kTpFrameHeaderBytes));
    if (!header.is_ok()) {
      check_refusal(header.status());
      return 0;
    }
    const size_t frame_bytes = kTpFrameHeaderBytes + header->payload_bytes;
    if (input.size() < frame_bytes) return 0;  // the connection would wait for the rest
    const Status decoded = decode_frame_payload(
        *header, input.subspan(kTpFrameHeaderBytes, header->payload_bytes), message);
    if (!decoded.is_ok()) {
      check_refusal(decoded);
      return 0;
    }
    check(message.kind == header->kind && message.step == header->step, "kind or step changed");
    check(encode_message(message, again).is_ok(), "an accepted frame does not encode");
    check(again.size() == frame_bytes && std::equal(again.begin(), again.end(), input.begin()),
          "an accepted frame encodes to other bytes");
    if (message.kind == TpMessageKind::kBatch) check_batch(message.batch);
    input = input.subspan(frame_bytes);
  }
  return 0;
}
