#include "model/importers/convert_common.h"

#include "core/thread_pool.h"
#include "model/importers/file_types.h"

namespace llamaserve {

Status write_llama_model(const ModelConfig& config, const TokenizerData& tokenizer,
                         std::vector<PlannedTensor> tensors, const std::string& default_name,
                         const ConvertOptions& options, ConvertSummary* summary) {
  if (options.output_path.empty()) {
    return make_error(StatusCode::kInvalidArgument, "no output path given (-o FILE)");
  }
  LS_ASSIGN_OR_RETURN(const FileType file_type, parse_file_type(options.type));
  LS_RETURN_IF_ERROR(validate_config(config));
  LS_RETURN_IF_ERROR(validate_tokenizer_data(tokenizer));
  if (static_cast<int64_t>(tokenizer.tokens.size()) != config.n_vocab) {
    return make_error(StatusCode::kInvalidArgument,
                      "the tokenizer has {} tokens but the embedding table has {} rows",
                      tokenizer.tokens.size(), config.n_vocab);
  }
  summary->config = config;
  summary->tokenizer_model = tokenizer.model;
  summary->tokenizer_pre = tokenizer.pre;
  std::vector<std::pair<std::string, std::string>> fallbacks;
  for (PlannedTensor& t : tensors) {
    const TensorTypeChoice choice =
        choose_tensor_type(file_type, t.name, t.dims, config.n_layer, config.tied_output);
    t.type = choice.type;
    if (!choice.fallback_note.empty()) fallbacks.emplace_back(t.name, choice.fallback_note);
  }
  for (std::string& line : group_tensor_notes(fallbacks)) summary->notes.push_back(std::move(line));
  GgufWriter writer;
  set_llama_metadata(writer, config, options.name.empty() ? default_name : options.name,
                     file_type.id);
  set_tokenizer_metadata(writer, tokenizer);

  ThreadPool pool(options.threads > 0 ? options.threads : ThreadPool::default_threads());
  summary->n_tensors = tensors.size();
  summary->n_bytes = planned_bytes(tensors);
  Progress progress("convert", summary->n_bytes, ProgressUnit::kBytes, options.progress);
  return write_planned_gguf(writer, tensors, options.output_path, pool, &progress);
}

}  // namespace llamaserve
