// The part every importer shares once it has a config, a tokenizer and its source tensors:
// per-tensor types from the file type's mix, metadata, and the streamed write.
#pragma once

#include <string>
#include <vector>

#include "model/importers/convert.h"
#include "model/importers/gguf_build.h"
#include "tokenizer/tokenizer_data.h"

namespace llamaserve {

// `tensors` carry names, dims and sources; their `type` is set here from options.type.
// Fills summary (config, tokenizer, counts, fallback notes).
Status write_llama_model(const ModelConfig& config, const TokenizerData& tokenizer,
                         std::vector<PlannedTensor> tensors, const std::string& default_name,
                         const ConvertOptions& options, ConvertSummary* summary);

}  // namespace llamaserve
