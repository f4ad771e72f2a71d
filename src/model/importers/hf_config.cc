#include "model/importers/hf_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "model/importers/json_input.h"

namespace llamaserve {
namespace {

using json = nlohmann::json;

constexpr std::string_view kSupported = "LlamaForCausalLM, MistralForCausalLM";

// A value as JSON text for an error message, cut short: the file may hold megabytes there.
std::string excerpt(const json& value) {
  std::string text = value.dump();
  if (text.size() > 100) text = text.substr(0, 100) + "...";
  return text;
}

const json* find_key(const json& obj, std::string_view key) {
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

Result<int64_t> get_int(const json& obj, std::string_view key, std::optional<int64_t> fallback) {
  const json* v = find_key(obj, key);
  if (v == nullptr) {
    if (fallback) return *fallback;
    return make_error(StatusCode::kNotFound, "config.json: missing key '{}'", key);
  }
  if (v->is_number_integer()) return v->get<int64_t>();
  // Some exporters write integers as 4096.0.
  if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
      std::fabs(v->get<double>()) < 1e15) {
    return static_cast<int64_t>(v->get<double>());
  }
  return make_error(StatusCode::kInvalidArgument,
                    "config.json: '{}' should be an integer, found {}", key, excerpt(*v));
}

// Every number read this way ends up in a float (the GGUF metadata type), so it must fit
// one: 1e300 would become inf and pass checks such as "factor > 0".
Result<double> get_number(const json& obj, std::string_view key, double fallback) {
  const json* v = find_key(obj, key);
  if (v == nullptr) return fallback;
  if (!v->is_number()) {
    return make_error(StatusCode::kInvalidArgument,
                      "config.json: '{}' should be a number, found {}", key, excerpt(*v));
  }
  const double value = v->get<double>();
  if (!std::isfinite(value) || std::fabs(value) > std::numeric_limits<float>::max()) {
    return make_error(StatusCode::kInvalidArgument,
                      "config.json: '{}' = {} is outside the range of a 32-bit float", key,
                      excerpt(*v));
  }
  return value;
}

Result<bool> get_bool(const json& obj, std::string_view key, bool fallback) {
  const json* v = find_key(obj, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) {
    return make_error(StatusCode::kInvalidArgument, "config.json: '{}' should be true or false",
                      key);
  }
  return v->get<bool>();
}

// bos/eos ids: an integer, a list of integers (the first is used), or absent.
std::optional<int64_t> get_token_id(const json& obj, std::string_view key) {
  const json* v = find_key(obj, key);
  if (v == nullptr) return std::nullopt;
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_array() && !v->empty() && (*v)[0].is_number_integer()) return (*v)[0].get<int64_t>();
  return std::nullopt;
}

// RoPE scaling from either `rope_scaling` (classic) or `rope_parameters` (newer transformers,
// which also carries rope_theta).
Status read_rope(const json& root, ModelConfig& c) {
  LS_ASSIGN_OR_RETURN(double theta, get_number(root, "rope_theta", 10000.0));
  const json* scaling = find_key(root, "rope_scaling");
  if (const json* params = find_key(root, "rope_parameters")) {
    if (!params->is_object()) {
      return make_error(StatusCode::kInvalidArgument,
                        "config.json: 'rope_parameters' is not an object");
    }
    LS_ASSIGN_OR_RETURN(theta, get_number(*params, "rope_theta", theta));
    if (scaling == nullptr) scaling = params;
  }
  if (!(theta > 0.0)) {
    return make_error(StatusCode::kInvalidArgument, "config.json: rope_theta = {} must be > 0",
                      theta);
  }
  c.rope_theta = static_cast<float>(theta);
  if (scaling == nullptr) return Status::ok();
  if (!scaling->is_object()) {
    return make_error(StatusCode::kInvalidArgument, "config.json: 'rope_scaling' is not an object");
  }
  std::string type = "default";
  for (const char* key : {"rope_type", "type"}) {
    if (const json* t = find_key(*scaling, key)) {
      if (!t->is_string()) {
        return make_error(StatusCode::kInvalidArgument,
                          "config.json: rope scaling '{}' is not a string", key);
      }
      type = t->get<std::string>();
      break;
    }
  }
  RopeScaling& s = c.rope_scaling;
  if (type == "default") return Status::ok();
  if (type != "linear" && type != "llama3") {
    return make_error(StatusCode::kUnsupported,
                      "config.json: RoPE scaling '{}' is not supported (supported: linear, llama3)",
                      type);
  }
  LS_ASSIGN_OR_RETURN(double factor, get_number(*scaling, "factor", 0.0));
  if (!(factor > 0.0)) {
    return make_error(StatusCode::kInvalidArgument, "config.json: RoPE scaling factor must be > 0");
  }
  s.factor = static_cast<float>(factor);
  if (type == "linear") {
    s.type = RopeScalingType::kLinear;
    return Status::ok();
  }
  s.type = RopeScalingType::kLlama3;
  LS_ASSIGN_OR_RETURN(double low, get_number(*scaling, "low_freq_factor", 1.0));
  LS_ASSIGN_OR_RETURN(double high, get_number(*scaling, "high_freq_factor", 4.0));
  LS_ASSIGN_OR_RETURN(s.original_context_length,
                      get_int(*scaling, "original_max_position_embeddings", 8192));
  s.low_freq_factor = static_cast<float>(low);
  s.high_freq_factor = static_cast<float>(high);
  return Status::ok();
}

Result<HfModelConfig> parse_hf_config_impl(std::string_view json_text) {
  LS_RETURN_IF_ERROR(check_json_nesting(json_text, "config.json"));
  json root = json::parse(json_text, nullptr, false);
  if (root.is_discarded() || !root.is_object()) {
    return make_error(StatusCode::kInvalidArgument, "config.json is not a JSON object");
  }
  HfModelConfig hf;
  if (const json* archs = find_key(root, "architectures")) {
    if (!archs->is_array() || archs->empty() || !(*archs)[0].is_string()) {
      return make_error(StatusCode::kInvalidArgument,
                        "config.json: 'architectures' should be a list of strings");
    }
    hf.architecture = (*archs)[0].get<std::string>();
  } else if (const json* type = find_key(root, "model_type"); type && type->is_string()) {
    const std::string model_type = type->get<std::string>();
    hf.architecture = model_type == "llama"     ? "LlamaForCausalLM"
                      : model_type == "mistral" ? "MistralForCausalLM"
                                                : model_type;
  } else {
    return make_error(StatusCode::kNotFound,
                      "config.json names no architecture ('architectures' or 'model_type')");
  }
  const bool mistral = hf.architecture == "MistralForCausalLM";
  if (hf.architecture != "LlamaForCausalLM" && !mistral) {
    return make_error(StatusCode::kUnsupported,
                      "architecture '{}' is not supported by convert; supported: {}",
                      hf.architecture, kSupported);
  }

  ModelConfig& c = hf.config;
  c.arch = "llama";
  LS_ASSIGN_OR_RETURN(c.n_embd, get_int(root, "hidden_size", std::nullopt));
  LS_ASSIGN_OR_RETURN(c.n_ff, get_int(root, "intermediate_size", std::nullopt));
  LS_ASSIGN_OR_RETURN(c.n_layer, get_int(root, "num_hidden_layers", std::nullopt));
  LS_ASSIGN_OR_RETURN(c.n_head, get_int(root, "num_attention_heads", std::nullopt));
  LS_ASSIGN_OR_RETURN(c.n_head_kv, get_int(root, "num_key_value_heads", c.n_head));
  LS_ASSIGN_OR_RETURN(c.n_vocab, get_int(root, "vocab_size", std::nullopt));
  // transformers' defaults where a key is absent.
  LS_ASSIGN_OR_RETURN(c.n_ctx_train,
                      get_int(root, "max_position_embeddings", mistral ? 131072 : 2048));
  LS_ASSIGN_OR_RETURN(double eps, get_number(root, "rms_norm_eps", 1e-6));
  c.norm_eps = static_cast<float>(eps);
  if (c.n_head <= 0 || c.n_embd <= 0) {
    return make_error(StatusCode::kInvalidArgument,
                      "config.json: hidden_size ({}) and num_attention_heads ({}) must be positive",
                      c.n_embd, c.n_head);
  }
  if (find_key(root, "head_dim") != nullptr) {
    LS_ASSIGN_OR_RETURN(c.head_dim, get_int(root, "head_dim", std::nullopt));
  } else if (c.n_embd % c.n_head != 0) {
    return make_error(StatusCode::kInvalidArgument,
                      "config.json: hidden_size {} is not divisible by num_attention_heads {}",
                      c.n_embd, c.n_head);
  } else {
    c.head_dim = c.n_embd / c.n_head;
  }
  c.rope_dim = c.head_dim;
  LS_ASSIGN_OR_RETURN(c.tied_output, get_bool(root, "tie_word_embeddings", false));
  LS_RETURN_IF_ERROR(read_rope(root, c));

  if (const json* act = find_key(root, "hidden_act");
      act && (!act->is_string() || act->get<std::string>() != "silu")) {
    return make_error(StatusCode::kUnsupported,
                      "config.json: hidden_act {} is not supported (LLaMA uses silu)",
                      excerpt(*act));
  }
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    LS_ASSIGN_OR_RETURN(bool bias, get_bool(root, key, false));
    if (bias) {
      return make_error(StatusCode::kUnsupported, "config.json: {} = true is not supported", key);
    }
  }
  LS_ASSIGN_OR_RETURN(double rotary_fraction, get_number(root, "partial_rotary_factor", 1.0));
  if (rotary_fraction != 1.0) {
    return make_error(StatusCode::kUnsupported,
                      "config.json: partial_rotary_factor = {} is not supported", rotary_fraction);
  }
  hf.bos_token_id = get_token_id(root, "bos_token_id");
  hf.eos_token_id = get_token_id(root, "eos_token_id");
  if (mistral) {
    if (const json* window = find_key(root, "sliding_window");
        window && window->is_number_integer())
      hf.sliding_window = window->get<int64_t>();
  }
  Status valid = validate_config(c);
  if (!valid.is_ok()) return valid.with_context("config.json");
  return hf;
}

}  // namespace

Result<HfModelConfig> parse_hf_config(std::string_view json_text) {
  // Every access checks the type first; this catches what a check might have missed, so a
  // hostile config.json gets an error message, not an abort.
  try {
    return parse_hf_config_impl(json_text);
  } catch (const json::exception& e) {
    return make_error(StatusCode::kInvalidArgument, "config.json: unexpected JSON: {}", e.what());
  }
}

Result<HfModelConfig> read_hf_config(const std::string& dir) {
  const std::filesystem::path path = std::filesystem::path(dir) / "config.json";
  std::ifstream in(path);
  if (!in) {
    return make_error(StatusCode::kNotFound,
                      "cannot open '{}' (is '{}' a Hugging Face model directory?)", path.string(),
                      dir);
  }
  std::stringstream text;
  text << in.rdbuf();
  return parse_hf_config(text.str());
}

}  // namespace llamaserve
