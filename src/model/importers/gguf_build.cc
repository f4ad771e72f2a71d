#include "model/importers/gguf_build.h"

#include <atomic>
#include <cstring>
#include <mutex>

#include "core/thread_pool.h"
#include "quant/quant.h"

namespace llamaserve {
namespace {

// Rows per parallel chunk: about 64 K elements, so chunks are small enough to balance and
// large enough that the pool's overhead does not show.
constexpr uint64_t kChunkElements = 1 << 16;

Status check_planned(const PlannedTensor& t) {
  if (t.dims.empty() || t.dims[0] == 0) {
    return make_error(StatusCode::kInvalidArgument, "tensor '{}' has no elements", t.name);
  }
  LS_RETURN_IF_ERROR(check_row(t.type, static_cast<int64_t>(t.dims[0]))
                         .with_context(fmt::format("tensor '{}'", t.name)));
  if (t.source == nullptr) {
    if (!t.generate) {
      return make_error(StatusCode::kInternal, "tensor '{}' has neither a source nor a generator",
                        t.name);
    }
    return Status::ok();
  }
  if (t.source_type != t.type) {
    LS_RETURN_IF_ERROR(check_row(t.source_type, static_cast<int64_t>(t.dims[0]))
                           .with_context(fmt::format("source of tensor '{}'", t.name)));
  }
  if (!t.row_map.empty()) {
    if (t.row_map.size() != t.n_rows()) {
      return make_error(StatusCode::kInternal, "tensor '{}': row map of {} rows for {} rows",
                        t.name, t.row_map.size(), t.n_rows());
    }
    for (int64_t r : t.row_map) {
      if (r < 0 || static_cast<uint64_t>(r) >= t.n_rows()) {
        return make_error(StatusCode::kInternal, "tensor '{}': row map entry {} out of range",
                          t.name, r);
      }
    }
  }
  return Status::ok();
}

Status fill_tensor(const PlannedTensor& t, uint8_t* out, ThreadPool& pool, Progress* progress) {
  const auto n_cols = static_cast<int64_t>(t.dims[0]);
  const uint64_t n_rows = t.n_rows();
  const size_t out_row_bytes = row_bytes(t.type, static_cast<size_t>(n_cols));
  const size_t src_row_bytes = t.source ? row_bytes(t.source_type, static_cast<size_t>(n_cols)) : 0;
  const bool copy = t.source != nullptr && t.source_type == t.type;
  const size_t grain = static_cast<size_t>(std::max<uint64_t>(1, kChunkElements / n_cols));

  std::mutex error_mutex;
  Status first_error;
  std::atomic<bool> failed{false};
  pool.parallel_for(n_rows, grain, [&](size_t begin, size_t end) {
    if (failed.load(std::memory_order_relaxed)) return;
    std::vector<float> row(copy ? 0 : static_cast<size_t>(n_cols));
    for (size_t r = begin; r < end; ++r) {
      uint8_t* dst = out + r * out_row_bytes;
      Status status;
      if (t.source) {
        const uint64_t src_row = t.row_map.empty() ? r : static_cast<uint64_t>(t.row_map[r]);
        const uint8_t* src = t.source + src_row * src_row_bytes;
        if (copy) {
          std::memcpy(dst, src, out_row_bytes);
          continue;
        }
        status = dequantize_row(t.source_type, src, row.data(), n_cols);
      } else {
        t.generate(static_cast<int64_t>(r), row.data());
      }
      if (status.is_ok()) status = quantize_row(t.type, row.data(), dst, n_cols);
      if (!status.is_ok()) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!failed.exchange(true)) first_error = status;
        return;
      }
    }
    if (progress) progress->add((end - begin) * out_row_bytes);
  });
  return first_error;
}

// Adds `tensors` to `writer`, then hands `write` the fill callback that encodes them.
Status write_planned(GgufWriter& writer, const std::vector<PlannedTensor>& tensors,
                     ThreadPool& pool, Progress* progress,
                     const std::function<Status(const GgufWriter::TensorFill&)>& write) {
  for (const PlannedTensor& t : tensors) {
    LS_RETURN_IF_ERROR(check_planned(t));
    LS_RETURN_IF_ERROR(writer.add_tensor(t.name, t.type, t.dims));
  }
  const auto fill = [&](size_t index, uint8_t* out, size_t n_bytes) -> Status {
    const PlannedTensor& t = tensors[index];
    if (n_bytes != t.n_bytes()) {
      return make_error(StatusCode::kInternal, "tensor '{}': writer asks for {} bytes, planned {}",
                        t.name, n_bytes, t.n_bytes());
    }
    if (progress) progress->set_detail(t.name);
    return fill_tensor(t, out, pool, progress);
  };
  LS_RETURN_IF_ERROR(write(fill));
  if (progress) progress->finish();
  return Status::ok();
}

}  // namespace

uint64_t PlannedTensor::n_rows() const {
  if (dims.empty() || dims[0] == 0) return 0;
  uint64_t n = 1;
  for (size_t i = 1; i < dims.size(); ++i) n *= dims[i];
  return n;
}

uint64_t PlannedTensor::n_bytes() const {
  return dims.empty() ? 0 : n_rows() * row_bytes(type, static_cast<size_t>(dims[0]));
}

uint64_t planned_bytes(const std::vector<PlannedTensor>& tensors) {
  uint64_t total = 0;
  for (const PlannedTensor& t : tensors) total += t.n_bytes();
  return total;
}

Status write_planned_gguf(GgufWriter& writer, const std::vector<PlannedTensor>& tensors,
                          const std::string& path, ThreadPool& pool, Progress* progress) {
  return write_planned(writer, tensors, pool, progress, [&](const GgufWriter::TensorFill& fill) {
    return writer.write(path, fill);
  });
}

Status write_planned_gguf_to_fd(GgufWriter& writer, const std::vector<PlannedTensor>& tensors,
                                int fd, ThreadPool& pool, Progress* progress) {
  return write_planned(writer, tensors, pool, progress, [&](const GgufWriter::TensorFill& fill) {
    return writer.write_mapped(fd, fill);
  });
}

void set_llama_metadata(GgufWriter& w, const ModelConfig& c, std::string_view name,
                        int32_t file_type) {
  w.set_string("general.architecture", "llama");
  if (!name.empty()) w.set_string("general.name", std::string(name));
  w.set_u32("general.file_type", static_cast<uint32_t>(file_type));
  w.set_u32("general.quantization_version", 2);
  w.set_u32("llama.context_length", static_cast<uint32_t>(c.n_ctx_train));
  w.set_u32("llama.embedding_length", static_cast<uint32_t>(c.n_embd));
  w.set_u32("llama.block_count", static_cast<uint32_t>(c.n_layer));
  w.set_u32("llama.feed_forward_length", static_cast<uint32_t>(c.n_ff));
  w.set_u32("llama.attention.head_count", static_cast<uint32_t>(c.n_head));
  w.set_u32("llama.attention.head_count_kv", static_cast<uint32_t>(c.n_head_kv));
  w.set_f32("llama.rope.freq_base", c.rope_theta);
  w.set_f32("llama.attention.layer_norm_rms_epsilon", c.norm_eps);
  w.set_u32("llama.vocab_size", static_cast<uint32_t>(c.n_vocab));
  w.set_u32("llama.rope.dimension_count", static_cast<uint32_t>(c.rope_dim));
  if (c.head_dim * c.n_head != c.n_embd) {
    w.set_u32("llama.attention.key_length", static_cast<uint32_t>(c.head_dim));
    w.set_u32("llama.attention.value_length", static_cast<uint32_t>(c.head_dim));
  }
  if (c.rope_scaling.type == RopeScalingType::kLinear) {
    w.set_string("llama.rope.scaling.type", "linear");
    w.set_f32("llama.rope.scaling.factor", c.rope_scaling.factor);
  }
}

void set_tokenizer_metadata(GgufWriter& w, const TokenizerData& data) {
  w.set_string("tokenizer.ggml.model", data.model);
  w.set_string("tokenizer.ggml.pre", data.pre);
  w.set_string_array("tokenizer.ggml.tokens", data.tokens);
  if (!data.scores.empty()) w.set_f32_array("tokenizer.ggml.scores", data.scores);
  std::vector<int32_t> types;
  types.reserve(data.token_types.size());
  for (TokenType t : data.token_types) types.push_back(static_cast<int32_t>(t));
  if (!types.empty()) w.set_i32_array("tokenizer.ggml.token_type", types);
  if (!data.merges.empty()) w.set_string_array("tokenizer.ggml.merges", data.merges);
  const auto set_id = [&](const char* key, const std::optional<int32_t>& id) {
    if (id) w.set_u32(key, static_cast<uint32_t>(*id));
  };
  set_id("tokenizer.ggml.bos_token_id", data.bos_id);
  set_id("tokenizer.ggml.eos_token_id", data.eos_id);
  set_id("tokenizer.ggml.unknown_token_id", data.unk_id);
  set_id("tokenizer.ggml.padding_token_id", data.pad_id);
  set_id("tokenizer.ggml.eot_token_id", data.eot_id);
  w.set_bool("tokenizer.ggml.add_bos_token", data.add_bos);
  w.set_bool("tokenizer.ggml.add_eos_token", data.add_eos);
  if (data.model == "llama") w.set_bool("tokenizer.ggml.add_space_prefix", data.add_space_prefix);
  if (!data.chat_template.empty()) w.set_string("tokenizer.chat_template", data.chat_template);
}

void copy_tokenizer_metadata(const GgufFile& vocab, GgufWriter& w) {
  for (const auto& [key, value] : vocab.metadata()) {
    if (key.starts_with("tokenizer.")) w.set(key, value);
  }
}

}  // namespace llamaserve
