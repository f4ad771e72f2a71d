// A 64-bit fingerprint of a loaded model, so that the ranks of a tensor-parallel group in
// separate processes (perhaps on separate hosts, with separate copies of the file) can check
// that they all loaded the same one before they pair up their shards.
#pragma once

#include <cstdint>

#include "model/weights.h"

namespace llamaserve {

// FNV-1a over the GGUF metadata (every key, type and value), the tensor directory (names,
// types, dimensions, offsets) and three 4 KiB windows of every tensor's data (its start, middle
// and end). A different file of the same shape differs in its data windows; a copy of the same
// file gives the same fingerprint. Reads at most 12 KiB per tensor, so it takes milliseconds
// even for a 70B model. PRECONDITION: model.file is set (a full model, not a tensor-parallel
// shard).
uint64_t model_fingerprint(const LoadedModel& model);

}  // namespace llamaserve
