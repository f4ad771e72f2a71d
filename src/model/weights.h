// Weights of a loaded model: views into the mmap'd GGUF file, one field per tensor.
// Nothing is copied; a QTensor points at the file mapping owned by LoadedModel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "quant/types.h"

namespace llamaserve {

// A tensor of any weight type. shape is row-major with the contiguous axis last: a matrix is
// {rows, cols} (GGUF dims reversed), a vector is {n}. Rows are row_bytes(type, cols) apart.
struct QTensor {
  std::string name;
  TensorType type = TensorType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t n_bytes = 0;

  int64_t cols() const { return shape.empty() ? 0 : shape.back(); }
  int64_t rows() const { return shape.size() < 2 ? 1 : shape[0]; }
  size_t bytes_per_row() const { return row_bytes(type, static_cast<size_t>(cols())); }
  const uint8_t* row(int64_t i) const {
    return static_cast<const uint8_t*>(data) + static_cast<size_t>(i) * bytes_per_row();
  }
  // Only valid for F32 tensors (norm weights, biases).
  const float* f32() const { return static_cast<const float*>(data); }
};

// One decoder block. Matrices map an input of `cols` features to `rows` outputs.
struct LayerWeights {
  QTensor attn_norm;          // (n_embd), F32
  QTensor wq;                 // (n_head * head_dim, n_embd)
  QTensor wk;                 // (n_head_kv * head_dim, n_embd)
  QTensor wv;                 // (n_head_kv * head_dim, n_embd)
  QTensor wo;                 // (n_embd, n_head * head_dim)
  std::optional<QTensor> bq;  // (n_head * head_dim), F32; qwen2
  std::optional<QTensor> bk;  // (n_head_kv * head_dim), F32
  std::optional<QTensor> bv;  // (n_head_kv * head_dim), F32
  QTensor ffn_norm;           // (n_embd), F32
  QTensor w_gate;             // (n_ff, n_embd)
  QTensor w_up;               // (n_ff, n_embd)
  QTensor w_down;             // (n_embd, n_ff)
};

// Bytes of one decoder block's tensors (matrices, norms, biases).
uint64_t layer_weight_bytes(const LayerWeights& layer);

struct ModelWeights {
  QTensor token_embd;  // (n_vocab, n_embd)
  std::vector<LayerWeights> layers;
  QTensor output_norm;  // (n_embd), F32
  QTensor output;       // (n_vocab, n_embd); a copy of token_embd's view when tied
  // LLaMA 3.1 files carry per-frequency divisors for RoPE instead of scaling metadata.
  std::optional<QTensor> rope_freqs;  // (rope_dim / 2), F32
};

// Maps GGUF tensor names (token_embd.weight, blk.N.attn_q.weight, ...) to the structs above,
// checking every shape against `config` and every type against what the kernels support.
Result<ModelWeights> map_weights(const GgufFile& file, const ModelConfig& config);

struct LoadedModel {
  std::unique_ptr<GgufFile> file;  // owns the mapping every QTensor points into
  ModelConfig config;
  ModelWeights weights;

  // Total bytes of the weight tensors (for bandwidth figures).
  uint64_t weight_bytes() const;
};

// Reports tensor bytes made resident so far (paged in from the file, or uploaded to a device)
// out of total_bytes. done_bytes strictly increases from call to call and the last call has
// done_bytes == total_bytes; `tensor` names the tensor the latest bytes belong to.
using LoadProgressFn =
    std::function<void(uint64_t done_bytes, uint64_t total_bytes, std::string_view tensor)>;

struct LoadOptions {
  // Reads every tensor's pages into memory before load_model returns, so that the first
  // forward pass does not stall on page faults, and a large file on a slow disk is read while
  // the user sees progress instead of during the first request. Off: pages come in on first
  // use (fine for tests and tools that touch a few tensors).
  bool prefault = false;
  LoadProgressFn on_progress;  // called while prefaulting; may be empty
};

// Opens, parses and validates a GGUF model. Weights stay mmap'd.
Result<std::shared_ptr<const LoadedModel>> load_model(const std::string& path,
                                                      const LoadOptions& options = {});

// Same, from a GgufFile the caller already opened.
Result<std::shared_ptr<const LoadedModel>> load_model(std::unique_ptr<GgufFile> file,
                                                      const LoadOptions& options = {});

// Makes the data of every tensor in `file` resident, in chunks of a few MiB in file order,
// calling on_progress (if set) after each chunk; total_bytes is the sum of the tensors' n_bytes.
// Uses madvise(MADV_POPULATE_READ) (Linux 5.14+) and falls back to reading one byte per page.
// Errors: an I/O error while reading the file (a disk error, or the file shrank after it was
// opened).
Status prefault_tensor_data(const GgufFile& file, const LoadProgressFn& on_progress = {});

// The same for an already loaded model (its GGUF file's tensors).
Status prefault_weights(const LoadedModel& model, const LoadProgressFn& on_progress = {});

}  // namespace llamaserve
