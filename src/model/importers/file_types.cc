#include "model/importers/file_types.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <optional>

#include <fmt/format.h>

#include "model/importers/llama_tensors.h"

namespace llamaserve {
namespace {

constexpr std::array kFileTypes = {
    FileType{"f32", 0, TensorType::F32, false, false},
    FileType{"f16", 1, TensorType::F16, false, false},
    FileType{"bf16", 32, TensorType::BF16, false, false},
    FileType{"q8_0", 7, TensorType::Q8_0, false, false},
    FileType{"q4_0", 2, TensorType::Q4_0, false, true},
    FileType{"q4_1", 3, TensorType::Q4_1, false, true},
    FileType{"q4_k_m", 15, TensorType::Q4_K, true, true},
    FileType{"q5_k_m", 17, TensorType::Q5_K, true, true},
    FileType{"q6_k", 18, TensorType::Q6_K, false, false},
};

// "blk.N.<suffix>" → N when the rest of the name is `suffix`.
std::optional<int64_t> layer_of(std::string_view name, std::string_view suffix) {
  if (!name.starts_with("blk.") || !name.ends_with(suffix)) return std::nullopt;
  const std::string_view middle = name.substr(4, name.size() - 4 - suffix.size());
  if (middle.size() < 2 || middle.back() != '.') return std::nullopt;
  int64_t layer = -1;
  const auto [end, ec] = std::from_chars(middle.data(), middle.data() + middle.size() - 1, layer);
  if (ec != std::errc() || end != middle.data() + middle.size() - 1) return std::nullopt;
  return layer;
}

TensorType block_fallback(TensorType type) {
  switch (type) {
    case TensorType::Q4_K: return TensorType::Q4_1;
    case TensorType::Q5_K:
    case TensorType::Q6_K: return TensorType::Q8_0;
    default: return TensorType::F16;
  }
}

}  // namespace

Result<FileType> parse_file_type(std::string_view name) {
  std::string lower;
  for (char ch : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (const FileType& type : kFileTypes) {
    if (type.name == lower) return type;
  }
  return make_error(StatusCode::kInvalidArgument, "unknown type '{}'; known: {}", name,
                    file_type_names());
}

std::string file_type_names() {
  std::string names;
  for (const FileType& type : kFileTypes) {
    names += names.empty() ? "" : ", ";
    names += type.name;
  }
  return names;
}

bool use_more_bits(int64_t layer, int64_t n_layer) {
  return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

TensorTypeChoice choose_tensor_type(const FileType& file_type, std::string_view name,
                                    std::span<const uint64_t> dims, int64_t n_layer,
                                    bool tied_output) {
  TensorTypeChoice choice;
  if (dims.size() < 2) return choice;  // vectors stay F32
  TensorType type = file_type.base;
  const bool is_head = name == "output.weight" || (tied_output && name == "token_embd.weight");
  if (file_type.q6_head && is_head) type = TensorType::Q6_K;
  if (file_type.k_mix) {
    if (name == "token_embd.weight") type = TensorType::Q6_K;
    for (std::string_view suffix :
         {std::string_view("attn_v.weight"), std::string_view("ffn_down.weight")}) {
      if (const std::optional<int64_t> layer = layer_of(name, suffix)) {
        if (use_more_bits(*layer, n_layer)) type = TensorType::Q6_K;
      }
    }
  }
  const uint64_t n = dims[0];
  while (n % traits(type).block_elems != 0) {
    const TensorType fallback = block_fallback(type);
    choice.fallback_note += fmt::format("{}{} -> {}", choice.fallback_note.empty() ? "" : ", ",
                                        type_name(type), type_name(fallback));
    type = fallback;
  }
  if (!choice.fallback_note.empty()) {
    choice.fallback_note += fmt::format(" (row length {} is not a multiple of the block)", n);
  }
  choice.type = type;
  return choice;
}

std::vector<std::string> group_tensor_notes(
    const std::vector<std::pair<std::string, std::string>>& name_and_note) {
  std::vector<std::pair<std::string, int>> groups;  // "pattern: note", count
  for (const auto& [name, note] : name_and_note) {
    std::string pattern = name;
    if (name.starts_with("blk.")) {
      const size_t dot = name.find('.', 4);
      if (dot != std::string::npos) pattern = "blk.*" + name.substr(dot);
    }
    const std::string key = pattern + ": " + note;
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& group) { return group.first == key; });
    if (it == groups.end()) {
      groups.emplace_back(key, 1);
    } else {
      ++it->second;
    }
  }
  std::vector<std::string> lines;
  for (const auto& [key, count] : groups) {
    lines.push_back(count > 1 ? fmt::format("{} [{} tensors]", key, count) : key);
  }
  return lines;
}

std::vector<NamedTensorBytes> llama_tensor_bytes(const ModelConfig& config,
                                                 const FileType& file_type) {
  std::vector<NamedTensorBytes> bytes;
  for (const LlamaTensorSpec& spec : llama_tensor_specs(config)) {
    const TensorType type =
        choose_tensor_type(file_type, spec.name, spec.dims, config.n_layer, config.tied_output)
            .type;
    uint64_t rows = 1;
    for (size_t i = 1; i < spec.dims.size(); ++i) rows *= spec.dims[i];
    bytes.push_back({spec.name, rows * row_bytes(type, static_cast<size_t>(spec.dims[0])),
                     static_cast<int64_t>(spec.dims[0]), type});
  }
  return bytes;
}

}  // namespace llamaserve
