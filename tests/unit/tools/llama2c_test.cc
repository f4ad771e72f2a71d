// llama2.c checkpoints: the header, the weight order, the tokenizer.bin quirks, and the
// refusals (truncation, mismatched vocabularies, versioned exports).
#include <gtest/gtest.h>

#include "gguf/gguf.h"
#include "model/importers/convert.h"
#include "model/weights.h"
#include "tokenizer/tokenizer_data.h"
#include "tools_test_util.h"

namespace llamaserve {
namespace {

using namespace tools_test;

struct Checkpoint {
  int32_t dim = 64, hidden = 96, layers = 2, heads = 4, kv_heads = 2, vocab = 300, seq_len = 32;
  bool shared = true;
  // The float arrays in file order (embd, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3,
  // rms_final, freq_cis, wcls), to compare the converted tensors with.
  std::vector<std::vector<float>> arrays;
};

void write_checkpoint(const fs::path& path, Checkpoint& c) {
  const int64_t kv_dim = c.dim / c.heads * c.kv_heads;
  const int64_t L = c.layers;
  const std::vector<int64_t> sizes = {int64_t{c.vocab} * c.dim,
                                      L * c.dim,
                                      L * c.dim * c.dim,
                                      L * kv_dim * c.dim,
                                      L * kv_dim * c.dim,
                                      L * c.dim * c.dim,
                                      L * c.dim,
                                      L * c.hidden * c.dim,
                                      L * c.dim * c.hidden,
                                      L * c.hidden * c.dim,
                                      c.dim,
                                      int64_t{c.seq_len} * (c.dim / c.heads),
                                      c.shared ? 0 : int64_t{c.vocab} * c.dim};
  std::vector<uint8_t> bytes;
  const int32_t header[7] = {
      c.dim, c.hidden, c.layers, c.heads, c.kv_heads, c.shared ? c.vocab : -c.vocab, c.seq_len};
  bytes.insert(bytes.end(), reinterpret_cast<const uint8_t*>(header),
               reinterpret_cast<const uint8_t*>(header) + sizeof(header));
  c.arrays.clear();
  for (size_t i = 0; i < sizes.size(); ++i) {
    c.arrays.push_back(
        random_floats(static_cast<size_t>(sizes[i]), 100 + static_cast<uint32_t>(i)));
    const auto b = f32_bytes(c.arrays.back());
    bytes.insert(bytes.end(), b.begin(), b.end());
  }
  write_bytes(path, bytes.data(), bytes.size());
}

// As llama2.c's tokenizer export writes it: '▁' as ' ', BOS/EOS wrapped in newlines.
void write_tokenizer(const fs::path& path, int32_t n_tokens) {
  std::vector<uint8_t> bytes(4, 0);
  bytes[0] = 16;  // max_token_length
  for (int32_t id = 0; id < n_tokens; ++id) {
    std::string piece;
    if (id == 0)
      piece = "<unk>";
    else if (id == 1)
      piece = "\n<s>\n";
    else if (id == 2)
      piece = "\n</s>\n";
    else if (id < 259)
      piece = fmt::format("<0x{:02X}>", id - 3);
    else
      piece = fmt::format(" w{}", id);
    const float score = -static_cast<float>(id);
    const int32_t len = static_cast<int32_t>(piece.size());
    bytes.insert(bytes.end(), reinterpret_cast<const uint8_t*>(&score),
                 reinterpret_cast<const uint8_t*>(&score) + 4);
    bytes.insert(bytes.end(), reinterpret_cast<const uint8_t*>(&len),
                 reinterpret_cast<const uint8_t*>(&len) + 4);
    bytes.insert(bytes.end(), piece.begin(), piece.end());
  }
  write_bytes(path, bytes.data(), bytes.size());
}

ConvertOptions options_for(const TempDir& dir) {
  ConvertOptions o;
  o.output_path = dir.file("out.gguf");
  o.type = "f32";
  o.threads = 2;
  o.progress = ProgressStyle::kSilent;
  return o;
}

// Row r of a tensor of an F32 GGUF.
const float* f32_row(const GgufFile& f, const char* name, uint64_t r) {
  const GgufTensorInfo* t = f.find_tensor(name);
  EXPECT_NE(t, nullptr) << name;
  EXPECT_EQ(t->type, TensorType::F32);
  return reinterpret_cast<const float*>(f.tensor_data(*t)) + r * t->dims[0];
}

TEST(Llama2cTest, ConvertsWeightsInOrderAndRestoresThePieces) {
  TempDir dir;
  for (bool shared : {true, false}) {
    SCOPED_TRACE(shared ? "shared classifier" : "separate classifier");
    Checkpoint c;
    c.shared = shared;
    write_checkpoint(dir.path() / "model.bin", c);
    write_tokenizer(dir.path() / "tok.bin", c.vocab);
    auto summary =
        convert_llama2c_model(dir.file("model.bin"), dir.file("tok.bin"), options_for(dir));
    ASSERT_TRUE(summary.is_ok()) << summary.status().to_string();

    auto model = load_model(dir.file("out.gguf"));
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();
    const ModelConfig& cfg = (*model)->config;
    EXPECT_EQ(cfg.n_embd, 64);
    EXPECT_EQ(cfg.n_ff, 96);
    EXPECT_EQ(cfg.n_head_kv, 2);
    EXPECT_EQ(cfg.n_ctx_train, 32);
    EXPECT_EQ(cfg.tied_output, shared);
    const GgufFile& f = *(*model)->file;
    // Layer 1's slice of each per-layer array; K has kv_dim = 32 rows of 64.
    EXPECT_EQ(f32_row(f, "blk.1.attn_k.weight", 5)[7], c.arrays[3][(32 * 64) + 5 * 64 + 7]);
    EXPECT_EQ(f32_row(f, "blk.1.attn_q.weight", 63)[0], c.arrays[2][64 * 64 + 63 * 64]);
    EXPECT_EQ(f32_row(f, "blk.0.ffn_gate.weight", 95)[63], c.arrays[7][95 * 64 + 63]);
    EXPECT_EQ(f32_row(f, "blk.1.ffn_down.weight", 3)[95], c.arrays[8][64 * 96 + 3 * 96 + 95]);
    EXPECT_EQ(f32_row(f, "blk.1.ffn_up.weight", 0)[1], c.arrays[9][96 * 64 + 1]);
    EXPECT_EQ(f32_row(f, "blk.1.ffn_norm.weight", 0)[2], c.arrays[6][64 + 2]);
    EXPECT_EQ(f32_row(f, "output_norm.weight", 0)[9], c.arrays[10][9]);
    EXPECT_EQ(f32_row(f, "token_embd.weight", 299)[0], c.arrays[0][299 * 64]);
    if (!shared) {
      EXPECT_EQ(f32_row(f, "output.weight", 7)[1], c.arrays[12][7 * 64 + 1]);
    }

    auto tok = tokenizer_data_from_gguf(f);
    ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
    EXPECT_EQ(tok->model, "llama");
    EXPECT_EQ(tok->tokens[1], "<s>");
    EXPECT_EQ(tok->tokens[2], "</s>");
    EXPECT_EQ(tok->tokens[13], "<0x0A>");
    EXPECT_EQ(tok->tokens[260], "\xE2\x96\x81w260");
    EXPECT_EQ(tok->token_types[0], TokenType::kUnknown);
    EXPECT_EQ(tok->token_types[2], TokenType::kControl);
    EXPECT_EQ(tok->token_types[13], TokenType::kByte);
    EXPECT_EQ(tok->token_types[260], TokenType::kNormal);
    EXPECT_EQ(tok->scores[260], -260.0f);
    EXPECT_EQ(tok->bos_id, 1);
    EXPECT_TRUE(tok->add_bos);
  }
}

TEST(Llama2cTest, RefusesMismatchedOrBrokenInputs) {
  TempDir dir;
  Checkpoint c;
  write_checkpoint(dir.path() / "model.bin", c);
  write_tokenizer(dir.path() / "tok.bin", c.vocab);
  const ConvertOptions o = options_for(dir);
  const auto error = [&](const std::string& model, const std::string& tok) {
    auto r = convert_llama2c_model(model, tok, o);
    EXPECT_FALSE(r.is_ok());
    EXPECT_FALSE(fs::exists(o.output_path));
    return r.is_ok() ? std::string() : r.status().message();
  };
  // Truncated weights.
  auto bytes = read_bytes(dir.path() / "model.bin");
  write_bytes(dir.path() / "short.bin", bytes.data(), bytes.size() - 4);
  EXPECT_NE(error(dir.file("short.bin"), dir.file("tok.bin")).find("truncated"), std::string::npos);
  write_bytes(dir.path() / "tiny.bin", bytes.data(), 10);
  EXPECT_NE(error(dir.file("tiny.bin"), dir.file("tok.bin")).find("28-byte"), std::string::npos);
  // A header that cannot be a model.
  auto bad = bytes;
  const int32_t three = 3;
  std::memcpy(bad.data() + 12, &three, 4);  // n_heads = 3 does not divide dim 64
  write_bytes(dir.path() / "bad.bin", bad.data(), bad.size());
  EXPECT_NE(error(dir.file("bad.bin"), dir.file("tok.bin")).find("n_heads"), std::string::npos);
  const uint32_t magic = 0x616b3432;
  std::memcpy(bad.data(), &magic, 4);
  write_bytes(dir.path() / "v1.bin", bad.data(), bad.size());
  EXPECT_NE(error(dir.file("v1.bin"), dir.file("tok.bin")).find("versioned"), std::string::npos);
  // Tokenizers with fewer or more tokens than the model's vocabulary.
  write_tokenizer(dir.path() / "small.bin", c.vocab - 1);
  EXPECT_NE(error(dir.file("model.bin"), dir.file("small.bin")).find("ends inside token 299"),
            std::string::npos);
  write_tokenizer(dir.path() / "big.bin", c.vocab + 1);
  EXPECT_NE(error(dir.file("model.bin"), dir.file("big.bin")).find("bytes after"),
            std::string::npos);
  EXPECT_FALSE(error(dir.file("missing.bin"), dir.file("tok.bin")).empty());
  EXPECT_FALSE(error(dir.file("model.bin"), dir.file("missing.bin")).empty());
}

}  // namespace
}  // namespace llamaserve
