#include "model/importers/quantize_model.h"

#include <filesystem>
#include <set>

#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "model/importers/file_types.h"
#include "model/importers/gguf_build.h"
#include "quant/quant.h"

namespace llamaserve {
namespace {

bool is_float_type(TensorType type) {
  return type == TensorType::F32 || type == TensorType::F16 || type == TensorType::BF16;
}

}  // namespace

Result<QuantizeSummary> quantize_model(const std::string& input_path,
                                       const std::string& output_path,
                                       const QuantizeOptions& options) {
  LS_ASSIGN_OR_RETURN(const FileType file_type, parse_file_type(options.type));
  std::error_code ec;
  if (std::filesystem::equivalent(input_path, output_path, ec)) {
    return make_error(StatusCode::kInvalidArgument,
                      "the output '{}' is the input file; write to another path", output_path);
  }
  LS_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::open(input_path));
  Result<ModelConfig> config = model_config_from_gguf(*file);
  if (!config.is_ok()) return config.status().with_context(input_path);

  QuantizeSummary summary;
  std::vector<PlannedTensor> tensors;
  std::vector<std::pair<std::string, std::string>> fallbacks;
  std::set<std::string> requantized_types;
  for (const GgufTensorInfo& info : file->tensors()) {
    if (!quant_supported(info.type)) {
      return make_error(StatusCode::kUnsupported,
                        "tensor '{}' has type {}, which cannot be decoded", info.name,
                        type_name(info.type));
    }
    PlannedTensor t;
    t.name = info.name;
    t.dims = info.dims;
    t.source = file->tensor_data(info);
    t.source_type = info.type;
    const TensorTypeChoice choice =
        choose_tensor_type(file_type, info.name, info.dims, config->n_layer, config->tied_output);
    t.type = choice.type;
    if (!choice.fallback_note.empty()) fallbacks.emplace_back(info.name, choice.fallback_note);
    if (t.type != t.source_type && !is_float_type(t.source_type)) {
      requantized_types.insert(type_name(t.source_type));
    }
    summary.input_bytes += info.n_bytes;
    ++summary.tensors_by_type[t.type];
    tensors.push_back(std::move(t));
  }
  summary.notes = group_tensor_notes(fallbacks);
  if (!requantized_types.empty()) {
    std::string types;
    for (const std::string& t : requantized_types) types += (types.empty() ? "" : ", ") + t;
    summary.notes.push_back(fmt::format(
        "the input is already quantized ({}): those tensors were dequantized and quantized "
        "again, which adds the new type's error to the old one",
        types));
  }

  GgufWriter writer(file->alignment());
  for (const auto& [key, value] : file->metadata()) {
    if (key == "general.alignment") continue;  // the writer records its own
    writer.set(key, value);
  }
  writer.set_u32("general.file_type", static_cast<uint32_t>(file_type.id));
  writer.set_u32("general.quantization_version", 2);

  ThreadPool pool(options.threads > 0 ? options.threads : ThreadPool::default_threads());
  summary.n_tensors = tensors.size();
  summary.output_bytes = planned_bytes(tensors);
  Progress progress("quantize", summary.output_bytes, ProgressUnit::kBytes, options.progress);
  LS_RETURN_IF_ERROR(write_planned_gguf(writer, tensors, output_path, pool, &progress));
  return summary;
}

}  // namespace llamaserve
