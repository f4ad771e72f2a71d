#include "model/weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace llamaserve {
namespace {

// Prefault granularity: small enough for a smooth progress bar and for the read-ahead of the
// next chunk to overlap the current one, large enough that the syscalls cost nothing.
constexpr uint64_t kPrefaultChunkBytes = 8ull << 20;

// Addresses as integers: the page-aligned ranges below may start before and end after the
// tensor they cover.
uintptr_t address(const uint8_t* p) { return reinterpret_cast<uintptr_t>(p); }
uintptr_t page_floor(uintptr_t a, uintptr_t page_bytes) { return a & ~(page_bytes - 1); }
uintptr_t page_ceil(uintptr_t a, uintptr_t page_bytes) {
  return (a + page_bytes - 1) & ~(page_bytes - 1);
}

// Asks the kernel to start reading [begin, end) in the background; a hint, errors ignored.
void read_ahead(uintptr_t begin, uintptr_t end, uintptr_t page_bytes) {
  if (begin >= end) return;
  const uintptr_t first = page_floor(begin, page_bytes);
  madvise(reinterpret_cast<void*>(first), end - first, MADV_WILLNEED);
}

// Makes the pages holding [begin, begin + n_bytes) resident and mapped, so that reading them
// later takes no page fault.
Status populate(const uint8_t* begin, size_t n_bytes, uintptr_t page_bytes) {
  const uintptr_t first = page_floor(address(begin), page_bytes);
  const uintptr_t last = page_ceil(address(begin) + n_bytes, page_bytes);
#ifdef MADV_POPULATE_READ
  while (true) {
    if (madvise(reinterpret_cast<void*>(first), last - first, MADV_POPULATE_READ) == 0) {
      return Status::ok();
    }
    if (errno == EINTR) continue;
    // EINVAL: a kernel before 5.14 (or memory it will not populate); read the pages instead.
    if (errno == EINVAL) break;
    return make_error(StatusCode::kIo, "reading {} bytes of tensor data failed: {}", n_bytes,
                      std::strerror(errno));
  }
#endif
  // One read per page, of a byte inside the range (the first page may start before it).
  for (uintptr_t page = first; page < last; page += page_bytes) {
    const uint8_t* p = begin + (std::max(page, address(begin)) - address(begin));
    static_cast<void>(*static_cast<const volatile uint8_t*>(p));
  }
  return Status::ok();
}

std::string dims_string(const std::vector<int64_t>& shape) {
  std::string out;
  for (int64_t d : shape) out += (out.empty() ? "" : ", ") + std::to_string(d);
  return "[" + out + "]";
}

// Builds a view of `name` and checks that its shape (contiguous axis last) is `expected`.
Result<QTensor> view(const GgufFile& file, const std::string& name, std::vector<int64_t> expected) {
  const GgufTensorInfo* info = file.find_tensor(name);
  if (info == nullptr) return make_error(StatusCode::kNotFound, "tensor '{}' is missing", name);
  QTensor t;
  t.name = name;
  t.type = info->type;
  for (auto it = info->dims.rbegin(); it != info->dims.rend(); ++it)
    t.shape.push_back(static_cast<int64_t>(*it));
  // GGUF may store a vector as {n, 1}; drop trailing unit outer dims of vectors.
  while (t.shape.size() > expected.size() && t.shape.front() == 1) t.shape.erase(t.shape.begin());
  if (t.shape != expected) {
    return make_error(StatusCode::kInvalidArgument,
                      "tensor '{}' has shape {} (rows, cols), expected {} from the model config",
                      name, dims_string(t.shape), dims_string(expected));
  }
  t.data = file.tensor_data(*info);
  t.n_bytes = info->n_bytes;
  const TypeTraits* traits = type_traits(static_cast<uint32_t>(t.type));
  if (traits == nullptr || !traits->weights_supported) {
    return make_error(StatusCode::kUnsupported,
                      "tensor '{}' has type {} which this build cannot compute with", name,
                      traits ? traits->name : "unknown");
  }
  if (t.cols() % traits->block_elems != 0) {
    return make_error(StatusCode::kInvalidArgument,
                      "tensor '{}': {} columns are not a multiple of the {} block ({})", name,
                      t.cols(), traits->name, traits->block_elems);
  }
  if (t.n_bytes != static_cast<size_t>(t.rows()) * t.bytes_per_row()) {
    return make_error(StatusCode::kInvalidArgument,
                      "tensor '{}' holds {} bytes, expected {} for its shape", name, t.n_bytes,
                      static_cast<size_t>(t.rows()) * t.bytes_per_row());
  }
  return t;
}

Result<QTensor> matrix(const GgufFile& file, const std::string& name, int64_t rows, int64_t cols) {
  return view(file, name, {rows, cols});
}

// Norm weights, biases and RoPE factors are small and always F32 in converted models.
Result<QTensor> f32_vector(const GgufFile& file, const std::string& name, int64_t n) {
  LS_ASSIGN_OR_RETURN(QTensor t, view(file, name, {n}));
  if (t.type != TensorType::F32) {
    return make_error(StatusCode::kUnsupported, "tensor '{}' has type {}, expected F32", name,
                      type_name(t.type));
  }
  return t;
}

Result<std::optional<QTensor>> optional_f32_vector(const GgufFile& file, const std::string& name,
                                                   int64_t n) {
  if (file.find_tensor(name) == nullptr) return std::optional<QTensor>();
  LS_ASSIGN_OR_RETURN(QTensor t, f32_vector(file, name, n));
  return std::optional<QTensor>(std::move(t));
}

Result<LayerWeights> map_layer(const GgufFile& file, const ModelConfig& c, int64_t layer) {
  const std::string p = fmt::format("blk.{}.", layer);
  LayerWeights w;
  LS_ASSIGN_OR_RETURN(w.attn_norm, f32_vector(file, p + "attn_norm.weight", c.n_embd));
  LS_ASSIGN_OR_RETURN(w.wq, matrix(file, p + "attn_q.weight", c.q_dim(), c.n_embd));
  LS_ASSIGN_OR_RETURN(w.wk, matrix(file, p + "attn_k.weight", c.kv_dim(), c.n_embd));
  LS_ASSIGN_OR_RETURN(w.wv, matrix(file, p + "attn_v.weight", c.kv_dim(), c.n_embd));
  LS_ASSIGN_OR_RETURN(w.wo, matrix(file, p + "attn_output.weight", c.n_embd, c.q_dim()));
  LS_ASSIGN_OR_RETURN(w.bq, optional_f32_vector(file, p + "attn_q.bias", c.q_dim()));
  LS_ASSIGN_OR_RETURN(w.bk, optional_f32_vector(file, p + "attn_k.bias", c.kv_dim()));
  LS_ASSIGN_OR_RETURN(w.bv, optional_f32_vector(file, p + "attn_v.bias", c.kv_dim()));
  if (c.attn_bias && (!w.bq || !w.bk || !w.bv)) {
    return make_error(StatusCode::kNotFound,
                      "layer {}: the model has attention biases but one of "
                      "attn_q.bias, attn_k.bias, attn_v.bias is missing",
                      layer);
  }
  LS_ASSIGN_OR_RETURN(w.ffn_norm, f32_vector(file, p + "ffn_norm.weight", c.n_embd));
  LS_ASSIGN_OR_RETURN(w.w_gate, matrix(file, p + "ffn_gate.weight", c.n_ff, c.n_embd));
  LS_ASSIGN_OR_RETURN(w.w_up, matrix(file, p + "ffn_up.weight", c.n_ff, c.n_embd));
  LS_ASSIGN_OR_RETURN(w.w_down, matrix(file, p + "ffn_down.weight", c.n_embd, c.n_ff));
  return w;
}

}  // namespace

Result<ModelWeights> map_weights(const GgufFile& file, const ModelConfig& config) {
  ModelWeights w;
  LS_ASSIGN_OR_RETURN(w.token_embd,
                      matrix(file, "token_embd.weight", config.n_vocab, config.n_embd));
  w.layers.reserve(static_cast<size_t>(config.n_layer));
  for (int64_t layer = 0; layer < config.n_layer; ++layer) {
    LS_ASSIGN_OR_RETURN(LayerWeights lw, map_layer(file, config, layer));
    w.layers.push_back(std::move(lw));
  }
  const std::string extra = fmt::format("blk.{}.attn_norm.weight", config.n_layer);
  if (file.find_tensor(extra) != nullptr) {
    return make_error(StatusCode::kInvalidArgument, "tensor '{}' exists but block_count is {}",
                      extra, config.n_layer);
  }
  LS_ASSIGN_OR_RETURN(w.output_norm, f32_vector(file, "output_norm.weight", config.n_embd));
  if (config.tied_output) {
    w.output = w.token_embd;
  } else {
    LS_ASSIGN_OR_RETURN(w.output, matrix(file, "output.weight", config.n_vocab, config.n_embd));
  }
  LS_ASSIGN_OR_RETURN(w.rope_freqs,
                      optional_f32_vector(file, "rope_freqs.weight", config.rope_dim / 2));
  return w;
}

uint64_t layer_weight_bytes(const LayerWeights& l) {
  uint64_t total = 0;
  for (const QTensor* t :
       {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_norm, &l.w_gate, &l.w_up, &l.w_down}) {
    total += t->n_bytes;
  }
  for (const auto* b : {&l.bq, &l.bk, &l.bv}) total += *b ? (*b)->n_bytes : 0;
  return total;
}

uint64_t LoadedModel::weight_bytes() const {
  uint64_t total = weights.token_embd.n_bytes + weights.output_norm.n_bytes;
  if (!config.tied_output) total += weights.output.n_bytes;
  for (const LayerWeights& l : weights.layers) total += layer_weight_bytes(l);
  return total;
}

Status prefault_tensor_data(const GgufFile& file, const LoadProgressFn& on_progress) {
  std::vector<const GgufTensorInfo*> tensors;
  uint64_t total_bytes = 0;
  uintptr_t region_end = 0;  // end of the last tensor: read-ahead stops there
  for (const GgufTensorInfo& info : file.tensors()) {
    if (info.n_bytes == 0) continue;
    tensors.push_back(&info);
    total_bytes += info.n_bytes;
    region_end = std::max(region_end, address(file.tensor_data(info)) + info.n_bytes);
  }
  // File order, so that the disk reads sequentially.
  std::sort(tensors.begin(), tensors.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  const auto page_bytes = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  uint64_t done_bytes = 0;
  for (const GgufTensorInfo* info : tensors) {
    const uint8_t* data = file.tensor_data(*info);
    for (uint64_t offset = 0; offset < info->n_bytes; offset += kPrefaultChunkBytes) {
      const uint64_t n = std::min(kPrefaultChunkBytes, info->n_bytes - offset);
      const uintptr_t chunk_end = address(data) + offset + n;
      read_ahead(chunk_end, std::min(region_end, chunk_end + kPrefaultChunkBytes), page_bytes);
      Status status = populate(data + offset, static_cast<size_t>(n), page_bytes);
      if (!status.is_ok()) return status.with_context(fmt::format("tensor '{}'", info->name));
      done_bytes += n;
      if (on_progress) on_progress(done_bytes, total_bytes, info->name);
    }
  }
  return Status::ok();
}

Status prefault_weights(const LoadedModel& model, const LoadProgressFn& on_progress) {
  return prefault_tensor_data(*model.file, on_progress);
}

Result<std::shared_ptr<const LoadedModel>> load_model(std::unique_ptr<GgufFile> file,
                                                      const LoadOptions& options) {
  auto model = std::make_shared<LoadedModel>();
  const std::string where = file->path().empty() ? std::string("model") : file->path();
  Result<ModelConfig> config = model_config_from_gguf(*file);
  if (!config) return config.status().with_context(where);
  model->config = std::move(config).value();
  Result<ModelWeights> weights = map_weights(*file, model->config);
  if (!weights) return weights.status().with_context(where);
  model->weights = std::move(weights).value();
  if (options.prefault) {
    Status status = prefault_tensor_data(*file, options.on_progress);
    if (!status.is_ok()) return status.with_context(where);
  }
  model->file = std::move(file);
  return std::shared_ptr<const LoadedModel>(std::move(model));
}

Result<std::shared_ptr<const LoadedModel>> load_model(const std::string& path,
                                                      const LoadOptions& options) {
  Result<std::unique_ptr<GgufFile>> file = GgufFile::open(path);
  if (!file) return file.status().with_context(path);
  return load_model(std::move(file).value(), options);
}

}  // namespace llamaserve
