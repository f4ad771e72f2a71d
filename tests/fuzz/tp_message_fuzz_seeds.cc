// Writes the seed corpus of tp_message_fuzz with the protocol's own encoders: one file per
// message kind, a batch of several sequences, and the conversation of a whole step (batch,
// status) as one stream.
//   tp_message_fuzz_seeds OUT_DIR
#include <cstdio>
#include <string>
#include <vector>

#include "parallel/distributed/tp_protocol.h"

namespace llamaserve {
namespace {

bool save(const std::string& dir, const char* name, const std::vector<uint8_t>& bytes) {
  const std::string path = dir + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return std::fclose(f) == 0 && ok;
}

Batch mixed_batch() {
  Batch b;
  for (int32_t r = 0; r < 6; ++r) {  // a prefill chunk of sequence 0
    b.tokens.push_back(100 + r);
    b.positions.push_back(r);
    b.seq_index.push_back(0);
  }
  b.tokens.push_back(7);  // a decode row of sequence 1
  b.positions.push_back(19);
  b.seq_index.push_back(1);
  b.blocks_per_seq = 3;
  b.block_tables = {4, -1, -1, 1, 2, -1};
  b.seq_lengths = {6, 20};
  b.logit_rows = {5, 6};
  return b;
}

int write_all(const std::string& dir) {
  std::vector<uint8_t> frame, stream;
  bool ok = true;
  encode_hello({1, 2, 0x1234abcd5678ef90ull, "host-b pid 4242 cuda:1"}, frame);
  ok &= save(dir, "hello", frame);
  TpSetup setup;
  setup.max_context_tokens = 4096;
  setup.kv_capacity_tokens = 32768;
  encode_setup(setup, frame);
  ok &= save(dir, "setup", frame);
  encode_status(0, Status::ok(), 2048, frame);
  ok &= save(dir, "status-plan", frame);
  encode_status(12, Status(StatusCode::kInternal, "cuda:1: an illegal memory access"), 0, frame);
  ok &= save(dir, "status-error", frame);
  encode_start(2048, frame);
  ok &= save(dir, "start", frame);
  TpCommId id;
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<uint8_t>(i);
  encode_comm_id(id, frame);
  ok &= save(dir, "comm-id", frame);
  encode_shutdown(frame);
  ok &= save(dir, "shutdown", frame);
  ok &= encode_batch(3, mixed_batch(), frame).is_ok();
  ok &= save(dir, "batch", frame);
  stream = frame;
  encode_status(3, Status::ok(), 0, frame);
  stream.insert(stream.end(), frame.begin(), frame.end());
  ok &= save(dir, "step-stream", stream);
  if (!ok) std::fprintf(stderr, "tp_message_fuzz_seeds: cannot write to %s\n", dir.c_str());
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace llamaserve

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: tp_message_fuzz_seeds OUT_DIR\n");
    return 2;
  }
  return llamaserve::write_all(argv[1]);
}
