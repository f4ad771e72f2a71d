#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "gguf/gguf.h"

namespace llamaserve {

int64_t ModelConfig::default_context_tokens() const {
  constexpr int64_t kUnknown = 4096, kMost = 8192;
  return std::min(n_ctx_train > 0 ? n_ctx_train : kUnknown, kMost);
}
namespace {

// Upper bounds far above any real model; they keep a hostile file from sizing buffers.
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxDim = 1 << 17;
constexpr int64_t kMaxContext = 1 << 24;

Result<int64_t> required_int(const GgufFile& file, const std::string& key) {
  if (file.find(key) == nullptr) {
    return make_error(StatusCode::kNotFound, "missing GGUF metadata key '{}'", key);
  }
  std::optional<int64_t> value = file.get_int(key);
  if (!value)
    return make_error(StatusCode::kInvalidArgument, "GGUF key '{}' is not an integer", key);
  return *value;
}

Result<float> optional_float(const GgufFile& file, const std::string& key, float fallback) {
  if (file.find(key) == nullptr) return fallback;
  std::optional<double> value = file.get_float(key);
  if (!value || !std::isfinite(*value)) {
    return make_error(StatusCode::kInvalidArgument, "GGUF key '{}' is not a finite number", key);
  }
  return static_cast<float>(*value);
}

Result<int64_t> optional_int(const GgufFile& file, const std::string& key, int64_t fallback) {
  if (file.find(key) == nullptr) return fallback;
  return required_int(file, key);
}

Status check_range(const char* what, int64_t value, int64_t max) {
  if (value <= 0 || value > max) {
    return make_error(StatusCode::kInvalidArgument, "{} = {} is outside [1, {}]", what, value, max);
  }
  return Status::ok();
}

Status read_rope_scaling(const GgufFile& file, const std::string& prefix, ModelConfig& config) {
  RopeScaling& scaling = config.rope_scaling;
  const std::string type_key = prefix + "rope.scaling.type";
  std::string type = "none";
  if (file.find(type_key) != nullptr) {
    std::optional<std::string> value = file.get_string(type_key);
    if (!value)
      return make_error(StatusCode::kInvalidArgument, "GGUF key '{}' is not a string", type_key);
    type = *value;
  } else if (file.find(prefix + "rope.scale_linear") != nullptr) {
    // Older files state linear scaling with this single key.
    type = "linear";
    LS_ASSIGN_OR_RETURN(scaling.factor, optional_float(file, prefix + "rope.scale_linear", 1.0f));
  }
  if (type == "none") {
    scaling.type = RopeScalingType::kNone;
    return Status::ok();
  }
  if (type != "linear" && type != "llama3") {
    return make_error(
        StatusCode::kUnsupported,
        "rope scaling type '{}' ({}) is not supported; supported: none, linear, llama3", type,
        type_key);
  }
  LS_ASSIGN_OR_RETURN(scaling.factor,
                      optional_float(file, prefix + "rope.scaling.factor", scaling.factor));
  if (!(scaling.factor > 0.0f)) {
    return make_error(StatusCode::kInvalidArgument, "rope scaling factor must be > 0, found {}",
                      scaling.factor);
  }
  if (type == "linear") {
    scaling.type = RopeScalingType::kLinear;
    return Status::ok();
  }
  scaling.type = RopeScalingType::kLlama3;
  LS_ASSIGN_OR_RETURN(
      scaling.low_freq_factor,
      optional_float(file, prefix + "rope.scaling.low_freq_factor", scaling.low_freq_factor));
  LS_ASSIGN_OR_RETURN(
      scaling.high_freq_factor,
      optional_float(file, prefix + "rope.scaling.high_freq_factor", scaling.high_freq_factor));
  LS_ASSIGN_OR_RETURN(scaling.original_context_length,
                      optional_int(file, prefix + "rope.scaling.original_context_length",
                                   scaling.original_context_length));
  return Status::ok();
}

// dims of a 2-D tensor in GGUF order: {columns (contiguous), rows}.
Status check_matrix(const GgufFile& file, const char* name, int64_t cols, int64_t rows) {
  const GgufTensorInfo* info = file.find_tensor(name);
  if (info == nullptr) return make_error(StatusCode::kNotFound, "tensor '{}' is missing", name);
  if (info->dims.size() != 2 || static_cast<int64_t>(info->dims[0]) != cols ||
      static_cast<int64_t>(info->dims[1]) != rows) {
    std::string found;
    for (uint64_t d : info->dims) found += (found.empty() ? "" : ", ") + std::to_string(d);
    return make_error(
        StatusCode::kInvalidArgument,
        "tensor '{}' has GGUF dims [{}], expected [{}, {}] (n_embd, n_vocab) from the metadata",
        name, found, cols, rows);
  }
  return Status::ok();
}

}  // namespace

const char* rope_ordering_name(RopeOrdering ordering) {
  return ordering == RopeOrdering::kNeox ? "neox" : "normal";
}

const char* rope_scaling_name(RopeScalingType type) {
  switch (type) {
    case RopeScalingType::kNone: return "none";
    case RopeScalingType::kLinear: return "linear";
    case RopeScalingType::kLlama3: return "llama3";
  }
  return "?";
}

Status validate_config(const ModelConfig& c) {
  LS_RETURN_IF_ERROR(check_range("n_vocab", c.n_vocab, kMaxVocabSize));
  LS_RETURN_IF_ERROR(check_range("n_embd", c.n_embd, kMaxDim));
  LS_RETURN_IF_ERROR(check_range("n_layer", c.n_layer, kMaxLayers));
  LS_RETURN_IF_ERROR(check_range("n_head", c.n_head, kMaxDim));
  LS_RETURN_IF_ERROR(check_range("n_head_kv", c.n_head_kv, kMaxDim));
  LS_RETURN_IF_ERROR(check_range("head_dim", c.head_dim, kMaxDim));
  LS_RETURN_IF_ERROR(check_range("n_ff", c.n_ff, kMaxDim * 4));
  LS_RETURN_IF_ERROR(check_range("n_ctx_train", c.n_ctx_train, kMaxContext));
  if (c.n_head % c.n_head_kv != 0) {
    return make_error(
        StatusCode::kInvalidArgument,
        "n_head ({}) is not divisible by n_head_kv ({}): grouped-query attention needs "
        "a whole number of query heads per KV head",
        c.n_head, c.n_head_kv);
  }
  if (c.head_dim % 2 != 0) {
    return make_error(StatusCode::kInvalidArgument, "head_dim = {} must be even for RoPE",
                      c.head_dim);
  }
  if (c.rope_dim <= 0 || c.rope_dim > c.head_dim || c.rope_dim % 2 != 0) {
    return make_error(StatusCode::kInvalidArgument,
                      "rope dimension count = {} must be even and within [2, head_dim = {}]",
                      c.rope_dim, c.head_dim);
  }
  if (!(c.rope_theta > 0.0f) || !std::isfinite(c.rope_theta)) {
    return make_error(StatusCode::kInvalidArgument, "rope theta must be > 0, found {}",
                      c.rope_theta);
  }
  if (!(c.norm_eps > 0.0f) || !(c.norm_eps < 1.0f)) {
    return make_error(StatusCode::kInvalidArgument, "norm epsilon must be in (0, 1), found {}",
                      c.norm_eps);
  }
  if (c.rope_scaling.type == RopeScalingType::kLlama3) {
    const RopeScaling& s = c.rope_scaling;
    if (!(s.low_freq_factor > 0.0f) || !(s.high_freq_factor > s.low_freq_factor) ||
        s.original_context_length <= 0) {
      return make_error(StatusCode::kInvalidArgument,
                        "llama3 rope scaling needs 0 < low_freq_factor < high_freq_factor and "
                        "original_context_length > 0; found {}, {}, {}",
                        s.low_freq_factor, s.high_freq_factor, s.original_context_length);
    }
  }
  return Status::ok();
}

Result<ModelConfig> model_config_from_gguf(const GgufFile& file) {
  ModelConfig c;
  std::optional<std::string> arch = file.get_string("general.architecture");
  if (!arch)
    return make_error(StatusCode::kNotFound, "missing GGUF metadata key 'general.architecture'");
  if (*arch != "llama" && *arch != "qwen2") {
    return make_error(StatusCode::kUnsupported,
                      "architecture '{}' is not supported; supported: llama (LLaMA 2/3, Mistral, "
                      "SmolLM2), qwen2",
                      *arch);
  }
  c.arch = *arch;
  const std::string p = c.arch + ".";
  LS_ASSIGN_OR_RETURN(c.n_embd, required_int(file, p + "embedding_length"));
  LS_ASSIGN_OR_RETURN(c.n_layer, required_int(file, p + "block_count"));
  LS_ASSIGN_OR_RETURN(c.n_head, required_int(file, p + "attention.head_count"));
  LS_ASSIGN_OR_RETURN(c.n_head_kv, optional_int(file, p + "attention.head_count_kv", c.n_head));
  LS_ASSIGN_OR_RETURN(c.n_ff, required_int(file, p + "feed_forward_length"));
  LS_ASSIGN_OR_RETURN(c.n_ctx_train, required_int(file, p + "context_length"));
  LS_RETURN_IF_ERROR(check_range("n_embd", c.n_embd, kMaxDim));
  LS_RETURN_IF_ERROR(check_range("n_head", c.n_head, kMaxDim));

  const std::string key_length = p + "attention.key_length";
  if (file.find(key_length) != nullptr) {
    LS_ASSIGN_OR_RETURN(c.head_dim, required_int(file, key_length));
  } else if (c.n_embd % c.n_head != 0) {
    return make_error(
        StatusCode::kInvalidArgument,
        "n_embd ({}) is not divisible by n_head ({}) and '{}' is absent: head_dim is unknown",
        c.n_embd, c.n_head, key_length);
  } else {
    c.head_dim = c.n_embd / c.n_head;
  }
  LS_ASSIGN_OR_RETURN(int64_t value_length,
                      optional_int(file, p + "attention.value_length", c.head_dim));
  if (value_length != c.head_dim) {
    return make_error(StatusCode::kUnsupported,
                      "head_dim mismatch: attention.value_length = {} differs from key_length = {}",
                      value_length, c.head_dim);
  }
  LS_ASSIGN_OR_RETURN(c.rope_dim, optional_int(file, p + "rope.dimension_count", c.head_dim));
  LS_ASSIGN_OR_RETURN(c.rope_theta, optional_float(file, p + "rope.freq_base", 10000.0f));
  const std::string eps_key = p + "attention.layer_norm_rms_epsilon";
  if (file.find(eps_key) == nullptr) {
    return make_error(StatusCode::kNotFound, "missing GGUF metadata key '{}'", eps_key);
  }
  LS_ASSIGN_OR_RETURN(c.norm_eps, optional_float(file, eps_key, 0.0f));
  LS_RETURN_IF_ERROR(read_rope_scaling(file, p, c));
  c.rope_ordering = c.arch == "qwen2" ? RopeOrdering::kNeox : RopeOrdering::kNormal;

  // The vocabulary size is whatever the embedding table holds; a metadata value must agree.
  const GgufTensorInfo* embd = file.find_tensor("token_embd.weight");
  if (embd == nullptr)
    return make_error(StatusCode::kNotFound, "tensor 'token_embd.weight' is missing");
  if (embd->dims.size() != 2) {
    return make_error(StatusCode::kInvalidArgument,
                      "tensor 'token_embd.weight' has {} dims, expected 2", embd->dims.size());
  }
  c.n_vocab = static_cast<int64_t>(embd->dims[1]);
  LS_RETURN_IF_ERROR(check_matrix(file, "token_embd.weight", c.n_embd, c.n_vocab));
  LS_ASSIGN_OR_RETURN(int64_t vocab_key, optional_int(file, p + "vocab_size", c.n_vocab));
  if (vocab_key != c.n_vocab) {
    return make_error(StatusCode::kInvalidArgument,
                      "'{}vocab_size' = {} but token_embd.weight has {} rows", p, vocab_key,
                      c.n_vocab);
  }
  c.tied_output = file.find_tensor("output.weight") == nullptr;
  if (!c.tied_output) LS_RETURN_IF_ERROR(check_matrix(file, "output.weight", c.n_embd, c.n_vocab));
  c.attn_bias = file.find_tensor("blk.0.attn_q.bias") != nullptr;

  LS_RETURN_IF_ERROR(validate_config(c));
  return c;
}

Result<TensorType> parse_kv_cache_type(std::string_view name) {
  if (name == "f16" || name == "F16") return TensorType::F16;
  if (name == "q8_0" || name == "Q8_0") return TensorType::Q8_0;
  return make_error(StatusCode::kInvalidArgument, "KV cache type '{}': use f16 or q8_0", name);
}

uint64_t kv_bytes_per_token(const ModelConfig& config, TensorType kv_type) {
  const uint64_t per_layer = row_bytes(kv_type, static_cast<size_t>(config.kv_dim()));
  return 2ull * static_cast<uint64_t>(config.n_layer) * per_layer;
}

}  // namespace llamaserve
