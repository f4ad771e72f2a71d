// How a layer pipeline divides a model: consecutive layer blocks per stage, balanced by the
// weight bytes each stage holds (the first stage also holds the embeddings, the last the
// final norm and output head), or as the operator wrote it (--layer-split 16,16).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/layer_range.h"
#include "core/status.h"
#include "model/weights.h"

namespace llamaserve {

// The stages' layer ranges. `requested` empty: balanced by bytes; else its values are the
// layers per stage (each >= 1, summing to n_layer). Errors name what does not add up.
Result<std::vector<LayerRange>> pipeline_layer_split(const LoadedModel& model, int stages,
                                                     std::span<const int32_t> requested);

// Device bytes of the weights of `range` as the CPU sees them (the GGUF tensor bytes).
uint64_t range_weight_bytes(const LoadedModel& model, const LayerRange& range);

}  // namespace llamaserve
