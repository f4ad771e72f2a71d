// Building a llama GGUF file from converted, quantized or generated tensors: the metadata
// keys (llama.* hyper-parameters, tokenizer.ggml.*) and a parallel, streamed tensor writer.
// convert, quantize and synth all end here.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/progress.h"
#include "core/status.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "quant/types.h"
#include "tokenizer/tokenizer_data.h"

namespace llamaserve {

class ThreadPool;

// One tensor of the output file and where its rows come from. A tensor is rows of dims[0]
// elements (GGUF order, innermost first).
struct PlannedTensor {
  std::string name;
  TensorType type = TensorType::F32;  // as written
  std::vector<uint64_t> dims;

  // Source rows in memory: row i is row_bytes(source_type, dims[0]) bytes at
  // source + i * that. When source_type == type the bytes are copied as they are.
  const uint8_t* source = nullptr;
  TensorType source_type = TensorType::F32;
  // Written row r comes from source row row_map[r]; empty means row r from row r.
  std::vector<int64_t> row_map;

  // Used when source is null: writes row `row` as dims[0] floats. Called from many threads
  // at once for different rows, so it must not share mutable state.
  std::function<void(int64_t row, float* out)> generate;

  uint64_t n_rows() const;
  uint64_t n_bytes() const;
};

// Adds `tensors` to `writer` (which holds the metadata already) and writes the file to
// `path` through a temporary file, so that a failure leaves nothing at `path`. Rows are
// decoded, permuted and encoded in parallel on `pool`, one tensor at a time, so memory stays
// at one output tensor. Every tensor is checked first: types the quantizer supports, rows
// that are whole blocks, sources in range. `progress` (may be null) counts output bytes.
Status write_planned_gguf(GgufWriter& writer, const std::vector<PlannedTensor>& tensors,
                          const std::string& path, ThreadPool& pool, Progress* progress);

// The same into `fd`, an empty file open for reading and writing (a memfd): the rows are
// encoded in parallel straight into a shared mapping of it (GgufWriter::write_mapped), so no
// tensor passes through a buffer.
Status write_planned_gguf_to_fd(GgufWriter& writer, const std::vector<PlannedTensor>& tensors,
                                int fd, ThreadPool& pool, Progress* progress);

// The sum of n_bytes() over `tensors` (the Progress total).
uint64_t planned_bytes(const std::vector<PlannedTensor>& tensors);

// general.architecture = llama, general.name, general.file_type, and the llama.* keys the
// model loader reads: context_length, embedding_length, block_count, feed_forward_length,
// attention.head_count(_kv), attention.layer_norm_rms_epsilon, rope.freq_base,
// rope.dimension_count, vocab_size, attention.key/value_length when head_dim differs from
// n_embd / n_head, and rope.scaling.* for linear scaling (LLaMA 3 scaling is written as a
// rope_freqs tensor instead; see llama3_rope_factors).
void set_llama_metadata(GgufWriter& writer, const ModelConfig& config, std::string_view name,
                        int32_t file_type);

// tokenizer.ggml.* and tokenizer.chat_template from `data`.
void set_tokenizer_metadata(GgufWriter& writer, const TokenizerData& data);

// Copies every tokenizer.* key of `vocab` (a vocabulary-only or full model GGUF).
void copy_tokenizer_metadata(const GgufFile& vocab, GgufWriter& writer);

}  // namespace llamaserve
