// llamaserve inspect: what a GGUF file holds, read from its header without touching weights.
//
//   llamaserve inspect -m FILE [--json] [--ctx N] [--tensors]
//     GGUF version, architecture, hyper-parameters (the <arch>.* keys), tokenizer, chat
//     template, tensor count and bytes per type, file size, and the f16 KV cache a context of
//     N tokens needs (N defaults to the trained context length).
//     --json prints one JSON object with the same facts plus every metadata entry (arrays
//     cut to their first 16 elements) and the tensor directory; --tensors lists the tensors
//     in text mode.
// A file the reader rejects prints the reader's error on stderr and exits with status 1.
#include <cstdio>
#include <map>

#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "gguf/gguf.h"

namespace llamaserve::cli {
namespace {

using json = nlohmann::ordered_json;

constexpr size_t kMaxArrayElemsShown = 16;
constexpr size_t kMaxTemplateLineShown = 160;  // text mode only

struct InspectOptions {
  std::string model_path;
  bool json_output = false;
  bool list_tensors = false;
  int64_t n_ctx = 0;  // 0: the file's context_length
};

// Hyper-parameters as `<arch>.<suffix>` keys. Kept to the raw keys on purpose: validating
// them into a model configuration is the model loader's job.
struct HParam {
  const char* name;
  const char* key_suffix;
  bool is_float;
};

constexpr HParam kHParams[] = {
    {"context_length", "context_length", false},
    {"embedding_length", "embedding_length", false},
    {"block_count", "block_count", false},
    {"feed_forward_length", "feed_forward_length", false},
    {"head_count", "attention.head_count", false},
    {"head_count_kv", "attention.head_count_kv", false},
    {"key_length", "attention.key_length", false},
    {"rope_freq_base", "rope.freq_base", true},
    {"rope_dimension_count", "rope.dimension_count", false},
    {"layer_norm_rms_epsilon", "attention.layer_norm_rms_epsilon", true},
    {"vocab_size", "vocab_size", false},
};

struct TypeUsage {
  uint64_t n_tensors = 0;
  uint64_t n_bytes = 0;
};

struct KvCacheEstimate {
  int64_t n_ctx = 0;
  int64_t n_layer = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  uint64_t bytes_f16 = 0;  // K and V, all layers
};

struct Summary {
  std::string architecture;
  std::string name;
  json hparams = json::object();  // name → number or null
  std::optional<std::string> tokenizer_model;
  std::optional<std::string> tokenizer_pre;
  std::optional<size_t> vocab_size;  // length of tokenizer.ggml.tokens
  std::optional<std::string> chat_template_first_line;
  std::map<TensorType, TypeUsage> by_type;
  uint64_t tensor_bytes = 0;
  std::optional<KvCacheEstimate> kv_cache;
};

std::optional<int64_t> arch_int(const GgufFile& file, const std::string& arch, const char* suffix) {
  return file.get_int(arch + "." + suffix);
}

Summary summarize(const GgufFile& file, int64_t n_ctx_override) {
  Summary s;
  s.architecture = file.get_string("general.architecture").value_or("");
  s.name = file.get_string("general.name").value_or("");
  for (const HParam& p : kHParams) {
    const std::string key = s.architecture + "." + p.key_suffix;
    json value = nullptr;
    if (p.is_float) {
      if (auto f = file.get_float(key)) value = *f;
    } else if (auto i = file.get_int(key)) {
      value = *i;
    }
    s.hparams[p.name] = value;
  }
  s.tokenizer_model = file.get_string("tokenizer.ggml.model");
  s.tokenizer_pre = file.get_string("tokenizer.ggml.pre");
  if (const GgufArray* tokens = file.get_array("tokenizer.ggml.tokens"))
    s.vocab_size = tokens->size();
  if (auto templ = file.get_string("tokenizer.chat_template")) {
    s.chat_template_first_line = templ->substr(0, templ->find('\n'));
  }
  for (const GgufTensorInfo& info : file.tensors()) {
    TypeUsage& usage = s.by_type[info.type];
    ++usage.n_tensors;
    usage.n_bytes += info.n_bytes;
    s.tensor_bytes += info.n_bytes;
  }

  const std::string& arch = s.architecture;
  const auto n_layer = arch_int(file, arch, "block_count");
  const auto n_embd = arch_int(file, arch, "embedding_length");
  const auto n_head = arch_int(file, arch, "attention.head_count");
  const auto n_head_kv = arch_int(file, arch, "attention.head_count_kv").has_value()
                             ? arch_int(file, arch, "attention.head_count_kv")
                             : n_head;
  auto head_dim = arch_int(file, arch, "attention.key_length");
  if (!head_dim && n_embd && n_head && *n_head > 0) head_dim = *n_embd / *n_head;
  const auto n_ctx = n_ctx_override > 0 ? std::optional<int64_t>(n_ctx_override)
                                        : arch_int(file, arch, "context_length");
  if (n_layer && n_head_kv && head_dim && n_ctx && *n_layer > 0 && *n_head_kv > 0 &&
      *head_dim > 0 && *n_ctx > 0) {
    KvCacheEstimate kv{*n_ctx, *n_layer, *n_head_kv, *head_dim, 0};
    // 2 tensors (K, V) × 2 bytes (f16) per element; huge header values must not overflow.
    unsigned __int128 bytes =
        static_cast<unsigned __int128>(2 * 2) * kv.n_ctx * kv.n_layer * kv.n_head_kv * kv.head_dim;
    if (bytes <= UINT64_MAX) {
      kv.bytes_f16 = static_cast<uint64_t>(bytes);
      s.kv_cache = kv;
    }
  }
  return s;
}

json value_to_json(const GgufValue& value) {
  if (const auto* u = std::get_if<uint64_t>(&value.data)) return *u;
  if (const auto* i = std::get_if<int64_t>(&value.data)) return *i;
  if (const auto* d = std::get_if<double>(&value.data)) return *d;
  if (const auto* b = std::get_if<bool>(&value.data)) return *b;
  if (const auto* s = std::get_if<std::string>(&value.data)) return *s;
  const GgufArray& array = std::get<GgufArray>(value.data);
  json values = json::array();
  const size_t n_shown = std::min(array.size(), kMaxArrayElemsShown);
  for (size_t i = 0; i < n_shown; ++i) {
    switch (array.elem_type) {
      case GgufValueType::STRING: values.push_back(array.strings[i]); break;
      case GgufValueType::FLOAT32:
      case GgufValueType::FLOAT64: values.push_back(array.floats[i]); break;
      case GgufValueType::BOOL: values.push_back(array.ints[i] != 0); break;
      case GgufValueType::UINT64: values.push_back(static_cast<uint64_t>(array.ints[i])); break;
      default: values.push_back(array.ints[i]); break;
    }
  }
  return json{{"elem_type", gguf_value_type_name(array.elem_type)},
              {"length", array.size()},
              {"values", std::move(values)}};
}

json optional_json(const auto& value) { return value ? json(*value) : json(nullptr); }

json to_json(const GgufFile& file, const Summary& s) {
  json out;
  out["file"] = file.path();
  out["file_size_bytes"] = file.file_size();
  out["gguf_version"] = file.version();
  out["alignment"] = file.alignment();
  out["data_offset"] = file.data_offset();
  out["architecture"] = s.architecture;
  out["name"] = s.name;
  out["hparams"] = s.hparams;
  out["tokenizer"] = {{"model", optional_json(s.tokenizer_model)},
                      {"pre", optional_json(s.tokenizer_pre)},
                      {"vocab_size", optional_json(s.vocab_size)},
                      {"chat_template", s.chat_template_first_line.has_value()},
                      {"chat_template_first_line", optional_json(s.chat_template_first_line)}};
  out["tensor_count"] = file.tensors().size();
  out["tensor_bytes"] = s.tensor_bytes;
  json by_type = json::object();
  for (const auto& [type, usage] : s.by_type) {
    by_type[type_name(type)] = {{"count", usage.n_tensors}, {"bytes", usage.n_bytes}};
  }
  out["tensor_types"] = std::move(by_type);
  if (s.kv_cache) {
    const KvCacheEstimate& kv = *s.kv_cache;
    out["kv_cache"] = {{"n_ctx", kv.n_ctx},
                       {"n_layer", kv.n_layer},
                       {"n_head_kv", kv.n_head_kv},
                       {"head_dim", kv.head_dim},
                       {"bytes_f16", kv.bytes_f16}};
  } else {
    out["kv_cache"] = nullptr;
  }
  json metadata = json::object();
  for (const auto& [key, value] : file.metadata()) {
    metadata[key] = {{"type", gguf_value_type_name(value.type)}, {"value", value_to_json(value)}};
  }
  out["metadata"] = std::move(metadata);
  json tensors = json::array();
  for (const GgufTensorInfo& info : file.tensors()) {
    tensors.push_back({{"name", info.name},
                       {"type", type_name(info.type)},
                       {"dims", info.dims},
                       {"offset", info.offset},
                       {"file_offset", file.data_offset() + info.offset},
                       {"bytes", info.n_bytes}});
  }
  out["tensors"] = std::move(tensors);
  return out;
}

std::string format_bytes(uint64_t n_bytes) {
  if (n_bytes >= (1ull << 30)) return fmt::format("{:.2f} GiB", n_bytes / double(1ull << 30));
  if (n_bytes >= (1ull << 20)) return fmt::format("{:.2f} MiB", n_bytes / double(1ull << 20));
  if (n_bytes >= (1ull << 10)) return fmt::format("{:.2f} KiB", n_bytes / double(1ull << 10));
  return fmt::format("{} B", n_bytes);
}

// Floats that came from FLOAT32 keys print as the float they are (1e-05, not 9.99...e-06).
std::string format_number(const json& value) {
  if (value.is_null()) return "-";
  if (!value.is_number_float()) return value.dump();
  const double d = value.get<double>();
  const float f = static_cast<float>(d);
  return static_cast<double>(f) == d ? fmt::format("{}", f) : fmt::format("{}", d);
}

void print_text(const GgufFile& file, const Summary& s, bool list_tensors) {
  fmt::print("file:           {} ({}, {} bytes)\n", file.path(), format_bytes(file.file_size()),
             file.file_size());
  fmt::print("GGUF version:   {} (alignment {}, data section at byte {})\n", file.version(),
             file.alignment(), file.data_offset());
  fmt::print("architecture:   {}\n", s.architecture.empty() ? "(not set)" : s.architecture);
  if (!s.name.empty()) fmt::print("name:           {}\n", s.name);
  fmt::print("hyper-parameters ({}.*):\n", s.architecture);
  for (const auto& [name, value] : s.hparams.items()) {
    fmt::print("  {:<24} {}\n", name, format_number(value));
  }
  fmt::print("tokenizer:      {} (pre {}), {} tokens\n", s.tokenizer_model.value_or("-"),
             s.tokenizer_pre.value_or("-"),
             s.vocab_size ? std::to_string(*s.vocab_size) : std::string("-"));
  if (s.chat_template_first_line) {
    std::string line = *s.chat_template_first_line;
    if (line.size() > kMaxTemplateLineShown) line = line.substr(0, kMaxTemplateLineShown) + "...";
    fmt::print("chat template:  yes: {}\n", line);
  } else {
    fmt::print("chat template:  no\n");
  }
  fmt::print("tensors:        {} ({})\n", file.tensors().size(), format_bytes(s.tensor_bytes));
  for (const auto& [type, usage] : s.by_type) {
    fmt::print("  {:<6} {:>6} tensors {:>12}\n", type_name(type), usage.n_tensors,
               format_bytes(usage.n_bytes));
  }
  if (s.kv_cache) {
    const KvCacheEstimate& kv = *s.kv_cache;
    fmt::print("KV cache (f16): {} for {} tokens ({} layers x {} KV heads x {} dims, K and V)\n",
               format_bytes(kv.bytes_f16), kv.n_ctx, kv.n_layer, kv.n_head_kv, kv.head_dim);
  }
  fmt::print("metadata:       {} keys\n", file.metadata().size());
  if (list_tensors) {
    for (const GgufTensorInfo& info : file.tensors()) {
      fmt::print("  {:<40} {:<5} [{}] {} bytes at {}\n", info.name, type_name(info.type),
                 fmt::join(info.dims, ", "), info.n_bytes, file.data_offset() + info.offset);
    }
  }
}

int run_inspect(const InspectOptions& options) {
  auto file = GgufFile::open(options.model_path);
  if (!file.is_ok()) {
    fmt::print(stderr, "llamaserve inspect: {}\n", file.status().to_string());
    return 1;
  }
  const Summary summary = summarize(**file, options.n_ctx);
  if (options.json_output) {
    // Metadata strings need not be valid UTF-8; replace bad bytes instead of throwing.
    fmt::print("{}\n",
               to_json(**file, summary).dump(2, ' ', false, json::error_handler_t::replace));
  } else {
    print_text(**file, summary, options.list_tensors);
  }
  return 0;
}

std::function<int()> setup_inspect(CLI::App& sub) {
  auto options = std::make_shared<InspectOptions>();
  sub.add_option("-m,--model", options->model_path, "GGUF file")->required();
  sub.add_flag("--json", options->json_output, "print one JSON object");
  sub.add_flag("--tensors", options->list_tensors, "list every tensor (text mode)");
  sub.add_option("--ctx", options->n_ctx, "context length for the KV cache estimate")
      ->check(CLI::PositiveNumber);
  return [options] { return run_inspect(*options); };
}

}  // namespace

LLAMASERVE_COMMAND(inspect, "inspect", "show a GGUF file's metadata, tensors and sizes",
                   setup_inspect);

}  // namespace llamaserve::cli
