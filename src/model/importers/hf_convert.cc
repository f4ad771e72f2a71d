// Hugging Face directory → GGUF: tensor names and shapes checked against config.json, Q/K
// rows permuted into GGUF's RoPE layout, LLaMA 3.1 scaling written as rope_freqs.
#include <filesystem>
#include <memory>
#include <set>

#include "model/importers/convert.h"
#include "model/importers/convert_common.h"
#include "model/importers/hf_config.h"
#include "model/importers/hf_tokenizer.h"
#include "model/importers/llama_tensors.h"
#include "model/importers/safetensors.h"

namespace llamaserve {
namespace {

std::string hf_name(const LlamaTensorSpec& spec) {
  const std::string layer = fmt::format("model.layers.{}.", spec.layer);
  switch (spec.kind) {
    case LlamaTensorKind::kTokenEmbd: return "model.embed_tokens.weight";
    case LlamaTensorKind::kAttnNorm: return layer + "input_layernorm.weight";
    case LlamaTensorKind::kAttnQ: return layer + "self_attn.q_proj.weight";
    case LlamaTensorKind::kAttnK: return layer + "self_attn.k_proj.weight";
    case LlamaTensorKind::kAttnV: return layer + "self_attn.v_proj.weight";
    case LlamaTensorKind::kAttnOutput: return layer + "self_attn.o_proj.weight";
    case LlamaTensorKind::kFfnNorm: return layer + "post_attention_layernorm.weight";
    case LlamaTensorKind::kFfnGate: return layer + "mlp.gate_proj.weight";
    case LlamaTensorKind::kFfnUp: return layer + "mlp.up_proj.weight";
    case LlamaTensorKind::kFfnDown: return layer + "mlp.down_proj.weight";
    case LlamaTensorKind::kOutputNorm: return "model.norm.weight";
    case LlamaTensorKind::kOutput: return "lm_head.weight";
  }
  return "";
}

Result<TensorType> source_type(const SafetensorsTensor& t) {
  if (t.dtype == "F32") return TensorType::F32;
  if (t.dtype == "F16") return TensorType::F16;
  if (t.dtype == "BF16") return TensorType::BF16;
  return make_error(StatusCode::kUnsupported,
                    "tensor '{}' ({}) has dtype {}; supported: F32, F16, BF16", t.name, t.file,
                    t.dtype);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text;
  for (int64_t d : shape) text += (text.empty() ? "" : ", ") + std::to_string(d);
  return "[" + text + "]";
}

Result<PlannedTensor> plan_tensor(const SafetensorsCheckpoint& ckpt, const LlamaTensorSpec& spec,
                                  const ModelConfig& c) {
  const std::string name = hf_name(spec);
  const SafetensorsTensor* t = ckpt.find(name);
  if (t == nullptr) {
    return make_error(StatusCode::kNotFound, "the checkpoint has no tensor '{}' (for {})", name,
                      spec.name);
  }
  // HF shapes are row-major, the reverse of GGUF's dims.
  const std::vector<int64_t> expected(spec.dims.rbegin(), spec.dims.rend());
  if (t->shape != expected) {
    return make_error(StatusCode::kInvalidArgument,
                      "tensor '{}' has shape {}, but config.json implies {}", name,
                      shape_text(t->shape), shape_text(expected));
  }
  PlannedTensor planned;
  planned.name = spec.name;
  planned.dims = spec.dims;
  planned.source = t->data;
  LS_ASSIGN_OR_RETURN(planned.source_type, source_type(*t));
  if (spec.kind == LlamaTensorKind::kAttnQ)
    planned.row_map = hf_to_gguf_rope_rows(c.n_head, c.head_dim);
  if (spec.kind == LlamaTensorKind::kAttnK) {
    planned.row_map = hf_to_gguf_rope_rows(c.n_head_kv, c.head_dim);
  }
  return planned;
}

// Names in the checkpoint that nothing maps: biases or extra modules this architecture does
// not have. Refusing them beats silently dropping weights.
Status check_unused(const SafetensorsCheckpoint& ckpt, const std::set<std::string>& used,
                    bool tied) {
  std::vector<std::string> unused;
  for (const auto& [name, tensor] : ckpt.tensors()) {
    if (used.count(name) || name.ends_with("rotary_emb.inv_freq")) continue;
    if (tied && name == "lm_head.weight") continue;  // a saved copy of the tied embeddings
    unused.push_back(name);
  }
  if (unused.empty()) return Status::ok();
  std::string list;
  for (size_t i = 0; i < std::min<size_t>(unused.size(), 5); ++i) {
    list += (list.empty() ? "" : ", ") + unused[i];
  }
  return make_error(StatusCode::kUnsupported,
                    "the checkpoint has {} tensor(s) the llama architecture does not use: {}{}",
                    unused.size(), list, unused.size() > 5 ? ", ..." : "");
}

}  // namespace

Result<ConvertSummary> convert_hf_model(const std::string& dir, const ConvertOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return make_error(StatusCode::kNotFound,
                      "'{}' is not a directory (expected a Hugging Face model directory)", dir);
  }
  LS_ASSIGN_OR_RETURN(HfModelConfig hf, read_hf_config(dir));
  ModelConfig& c = hf.config;
  LS_ASSIGN_OR_RETURN(SafetensorsCheckpoint ckpt, SafetensorsCheckpoint::open_dir(dir));
  LS_ASSIGN_OR_RETURN(TokenizerData tokenizer,
                      read_hf_tokenizer(dir, {c.n_vocab, hf.bos_token_id, hf.eos_token_id}));

  ConvertSummary summary;
  std::vector<PlannedTensor> tensors;
  std::set<std::string> used;
  for (const LlamaTensorSpec& spec : llama_tensor_specs(c)) {
    LS_ASSIGN_OR_RETURN(PlannedTensor planned, plan_tensor(ckpt, spec, c));
    used.insert(hf_name(spec));
    tensors.push_back(std::move(planned));
  }
  LS_RETURN_IF_ERROR(check_unused(ckpt, used, c.tied_output));

  if (c.rope_scaling.type == RopeScalingType::kLlama3) {
    auto factors = std::make_shared<std::vector<float>>(llama3_rope_factors(c));
    PlannedTensor freqs;
    freqs.name = "rope_freqs.weight";
    freqs.dims = {factors->size()};
    freqs.generate = [factors](int64_t, float* out) {
      std::copy(factors->begin(), factors->end(), out);
    };
    tensors.push_back(std::move(freqs));
    summary.notes.push_back(fmt::format(
        "LLaMA 3 RoPE scaling (factor {}, original context {}) written as rope_freqs.weight",
        c.rope_scaling.factor, c.rope_scaling.original_context_length));
  }
  if (hf.sliding_window && *hf.sliding_window < c.n_ctx_train) {
    summary.notes.push_back(fmt::format(
        "sliding_window {} is not applied: the engine attends to the whole context, which "
        "matches the original model for sequences up to {} tokens",
        *hf.sliding_window, *hf.sliding_window));
  }
  fs::path dir_path = fs::path(dir).lexically_normal();
  if (dir_path.filename().empty()) dir_path = dir_path.parent_path();  // "models/x/" -> "models/x"
  const std::string default_name = dir_path.filename().string();
  Status status =
      write_llama_model(c, tokenizer, std::move(tensors),
                        default_name.empty() ? "model" : default_name, options, &summary);
  if (!status.is_ok()) return status;
  return summary;
}

}  // namespace llamaserve
