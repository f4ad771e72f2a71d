// llama2.c checkpoint → GGUF.
//
// model.bin (legacy "version 0" export): 7 little-endian int32 — dim, hidden_dim, n_layers,
// n_heads, n_kv_heads, vocab_size (negative: the classifier is stored separately), seq_len —
// then float32 arrays in this order (rows × cols, row-major, rows = outputs):
//   token_embedding (vocab, dim) | rms_att (L, dim) | wq (L, dim, dim) | wk (L, kv_dim, dim) |
//   wv (L, kv_dim, dim) | wo (L, dim, dim) | rms_ffn (L, dim) | w1 (L, hidden, dim) |
//   w2 (L, dim, hidden) | w3 (L, hidden, dim) | rms_final (dim) |
//   freq_cis_real, freq_cis_imag (seq_len × head_size/2 each; unused) | wcls (vocab, dim)
// llama2.c rotates the pairs (2i, 2i+1) of each head, GGUF's own layout: no permutation.
//
// tokenizer.bin: int32 max_token_length, then per token float32 score, int32 length, bytes.
// The exporter wrote SentencePiece pieces with '▁' turned into ' ' and BOS/EOS as
// "\n<s>\n" / "\n</s>\n"; both are undone here.
#include <cctype>
#include <cstring>
#include <filesystem>

#include "core/mapped_file.h"
#include "model/config.h"
#include "model/importers/convert.h"
#include "model/importers/convert_common.h"
#include "model/importers/llama_tensors.h"

namespace llamaserve {
namespace {

constexpr uint32_t kVersionedMagic = 0x616b3432;  // "ak42": llama2.c export versions >= 1
constexpr int32_t kMaxDim = 1 << 16;
constexpr int32_t kMaxLayers = 1024;
constexpr int32_t kMaxSeqLen = 1 << 24;
constexpr int32_t kMaxTokenBytes = 1 << 16;

struct Llama2cHeader {
  int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
};

int32_t read_i32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

Status check_header(const Llama2cHeader& h) {
  const auto bad = [&](const char* what) {
    return make_error(StatusCode::kInvalidArgument,
                      "llama2.c header (dim {}, hidden_dim {}, n_layers {}, n_heads {}, n_kv_heads "
                      "{}, vocab_size {}, seq_len {}): {}",
                      h.dim, h.hidden_dim, h.n_layers, h.n_heads, h.n_kv_heads, h.vocab_size,
                      h.seq_len, what);
  };
  if (h.dim <= 0 || h.dim > kMaxDim || h.hidden_dim <= 0 || h.hidden_dim > 4 * kMaxDim)
    return bad("dimensions out of range");
  if (h.n_layers <= 0 || h.n_layers > kMaxLayers) return bad("layer count out of range");
  if (h.n_heads <= 0 || h.n_kv_heads <= 0 || h.n_heads > h.dim || h.n_heads % h.n_kv_heads != 0)
    return bad("n_heads must be positive and a multiple of n_kv_heads");
  if (h.dim % h.n_heads != 0 || (h.dim / h.n_heads) % 2 != 0)
    return bad("dim must split into heads of an even size");
  if (h.vocab_size == 0 || h.vocab_size < -kMaxVocabSize || h.vocab_size > kMaxVocabSize)
    return bad("vocab_size out of range");
  if (h.seq_len <= 0 || h.seq_len > kMaxSeqLen) return bad("seq_len out of range");
  return Status::ok();
}

struct TokenizerBin {
  std::vector<std::string> pieces;
  std::vector<float> scores;
};

Result<TokenizerBin> read_tokenizer_bin(const std::string& path, int32_t vocab_size) {
  LS_ASSIGN_OR_RETURN(auto file, MappedFile::open(path));
  const uint8_t* p = file->data();
  const uint8_t* end = p + file->size();
  const auto truncated = [&](int32_t token) {
    return make_error(StatusCode::kInvalidArgument,
                      "tokenizer '{}' ends inside token {} of {} (truncated, or a vocabulary of "
                      "another size than the model's?)",
                      path, token, vocab_size);
  };
  if (end - p < 4) return truncated(0);
  p += 4;  // max_token_length: a hint for the C runtime's buffers
  TokenizerBin bin;
  for (int32_t i = 0; i < vocab_size; ++i) {
    if (end - p < 8) return truncated(i);
    float score;
    std::memcpy(&score, p, sizeof(score));
    const int32_t len = read_i32(p + 4);
    p += 8;
    if (len < 0 || len > kMaxTokenBytes) {
      return make_error(StatusCode::kInvalidArgument, "tokenizer '{}': token {} has length {}",
                        path, i, len);
    }
    if (end - p < len) return truncated(i);
    std::string piece(reinterpret_cast<const char*>(p), static_cast<size_t>(len));
    p += len;
    bin.pieces.push_back(std::move(piece));
    bin.scores.push_back(score);
  }
  if (p != end) {
    return make_error(StatusCode::kInvalidArgument,
                      "tokenizer '{}' has {} bytes after its {} tokens (a vocabulary of another "
                      "size than the model's?)",
                      path, end - p, vocab_size);
  }
  return bin;
}

bool is_byte_piece(const std::string& piece) {
  return piece.size() == 6 && piece.starts_with("<0x") && piece.back() == '>' &&
         std::isxdigit(static_cast<unsigned char>(piece[3])) &&
         std::isxdigit(static_cast<unsigned char>(piece[4]));
}

TokenizerData tokenizer_from_bin(TokenizerBin bin) {
  TokenizerData data;
  data.model = "llama";
  data.pre = "default";
  data.unk_id = 0;
  data.bos_id = 1;
  data.eos_id = 2;
  data.add_bos = true;
  data.add_space_prefix = true;
  for (size_t id = 0; id < bin.pieces.size(); ++id) {
    std::string piece;
    for (char ch : bin.pieces[id])
      piece += ch == ' ' ? std::string("\xE2\x96\x81") : std::string(1, ch);
    TokenType type = TokenType::kNormal;
    if (id == 0) {
      type = TokenType::kUnknown;
    } else if (id == 1 || id == 2) {
      piece = id == 1 ? "<s>" : "</s>";
      type = TokenType::kControl;
    } else if (is_byte_piece(piece)) {
      type = TokenType::kByte;
    }
    data.tokens.push_back(std::move(piece));
    data.token_types.push_back(type);
  }
  data.scores = std::move(bin.scores);
  return data;
}

}  // namespace

Result<ConvertSummary> convert_llama2c_model(const std::string& model_path,
                                             const std::string& tokenizer_path,
                                             const ConvertOptions& options) {
  LS_ASSIGN_OR_RETURN(auto file, MappedFile::open(model_path));
  const uint64_t size = file->size();
  if (size < 28) {
    return make_error(StatusCode::kInvalidArgument,
                      "'{}' is {} bytes, shorter than the 28-byte llama2.c header", model_path,
                      size);
  }
  const uint8_t* base = file->data();
  if (static_cast<uint32_t>(read_i32(base)) == kVersionedMagic) {
    return make_error(StatusCode::kUnsupported,
                      "'{}' is a versioned llama2.c export (magic \"ak42\"); convert reads the "
                      "legacy format (export.py --version 0, or the original .bin files)",
                      model_path);
  }
  Llama2cHeader h;
  int32_t* fields[] = {&h.dim,        &h.hidden_dim, &h.n_layers, &h.n_heads,
                       &h.n_kv_heads, &h.vocab_size, &h.seq_len};
  for (int i = 0; i < 7; ++i) *fields[i] = read_i32(base + 4 * i);
  Status header_ok = check_header(h);
  if (!header_ok.is_ok()) return header_ok.with_context(model_path);

  const bool shared_classifier = h.vocab_size > 0;
  const uint64_t vocab = static_cast<uint64_t>(shared_classifier ? h.vocab_size : -h.vocab_size);
  const uint64_t dim = h.dim, hidden = h.hidden_dim, L = h.n_layers;
  const uint64_t head_size = dim / h.n_heads;
  const uint64_t kv_dim = head_size * h.n_kv_heads;

  ModelConfig c;
  c.arch = "llama";
  c.n_vocab = static_cast<int64_t>(vocab);
  c.n_embd = h.dim;
  c.n_layer = h.n_layers;
  c.n_head = h.n_heads;
  c.n_head_kv = h.n_kv_heads;
  c.head_dim = static_cast<int64_t>(head_size);
  c.rope_dim = c.head_dim;
  c.n_ff = h.hidden_dim;
  c.n_ctx_train = h.seq_len;
  c.rope_theta = 10000.0f;  // hard-coded in llama2.c's run.c, as is the norm epsilon
  c.norm_eps = 1e-5f;
  c.tied_output = shared_classifier;

  // Float offsets of each array, in file order.
  uint64_t offset = 0;
  const auto take = [&offset](uint64_t n_floats) {
    const uint64_t at = offset;
    offset += n_floats;
    return at;
  };
  const uint64_t o_embd = take(vocab * dim);
  const uint64_t o_rms_att = take(L * dim);
  const uint64_t o_wq = take(L * dim * dim);
  const uint64_t o_wk = take(L * kv_dim * dim);
  const uint64_t o_wv = take(L * kv_dim * dim);
  const uint64_t o_wo = take(L * dim * dim);
  const uint64_t o_rms_ffn = take(L * dim);
  const uint64_t o_w1 = take(L * hidden * dim);
  const uint64_t o_w2 = take(L * dim * hidden);
  const uint64_t o_w3 = take(L * hidden * dim);
  const uint64_t o_rms_final = take(dim);
  take(static_cast<uint64_t>(h.seq_len) * head_size);  // freq_cis_real + freq_cis_imag
  const uint64_t o_wcls = shared_classifier ? o_embd : take(vocab * dim);
  const uint64_t expected_bytes = 28 + 4 * offset;
  if (size != expected_bytes) {
    return make_error(StatusCode::kInvalidArgument,
                      "'{}' is {} bytes, but its header (dim {}, hidden_dim {}, {} layers, {} "
                      "heads, {} KV heads, vocab {}{}, seq_len {}) implies {} bytes{}",
                      model_path, size, h.dim, h.hidden_dim, h.n_layers, h.n_heads, h.n_kv_heads,
                      vocab, shared_classifier ? " shared" : " unshared", h.seq_len, expected_bytes,
                      size < expected_bytes ? " (truncated?)" : "");
  }

  LS_ASSIGN_OR_RETURN(TokenizerBin bin,
                      read_tokenizer_bin(tokenizer_path, static_cast<int32_t>(vocab)));
  const TokenizerData tokenizer = tokenizer_from_bin(std::move(bin));

  const uint8_t* floats = base + 28;
  std::vector<PlannedTensor> tensors;
  for (const LlamaTensorSpec& spec : llama_tensor_specs(c)) {
    // Elements of one layer's array; the layer's slice starts at offset + layer * per_layer.
    const uint64_t per_layer = spec.dims.size() == 1 ? spec.dims[0] : spec.dims[0] * spec.dims[1];
    const uint64_t layer = spec.layer < 0 ? 0 : static_cast<uint64_t>(spec.layer);
    uint64_t at = 0;
    switch (spec.kind) {
      case LlamaTensorKind::kTokenEmbd: at = o_embd; break;
      case LlamaTensorKind::kAttnNorm: at = o_rms_att; break;
      case LlamaTensorKind::kAttnQ: at = o_wq; break;
      case LlamaTensorKind::kAttnK: at = o_wk; break;
      case LlamaTensorKind::kAttnV: at = o_wv; break;
      case LlamaTensorKind::kAttnOutput: at = o_wo; break;
      case LlamaTensorKind::kFfnNorm: at = o_rms_ffn; break;
      case LlamaTensorKind::kFfnGate: at = o_w1; break;
      case LlamaTensorKind::kFfnDown: at = o_w2; break;
      case LlamaTensorKind::kFfnUp: at = o_w3; break;
      case LlamaTensorKind::kOutputNorm: at = o_rms_final; break;
      case LlamaTensorKind::kOutput: at = o_wcls; break;
    }
    PlannedTensor planned;
    planned.name = spec.name;
    planned.dims = spec.dims;
    planned.source = floats + 4 * (at + layer * per_layer);
    planned.source_type = TensorType::F32;
    tensors.push_back(std::move(planned));
  }
  ConvertSummary summary;
  const std::string default_name = std::filesystem::path(model_path).stem().string();
  Status status =
      write_llama_model(c, tokenizer, std::move(tensors), default_name, options, &summary);
  if (!status.is_ok()) return status;
  return summary;
}

}  // namespace llamaserve
