// Synthetic models that never touch the disk, for benchmarks of shapes larger than the disk
// (`llamaserve bench --synth llama2-70b:f16`: 138 GB of F16 weights on a machine with 256 GiB
// of memory and 128 GiB of disk). The GGUF file `llamaserve synth` would write is written into
// an anonymous memory file (memfd_create) by the same writer, its rows encoded in parallel
// straight into the file's pages, and then loaded by the normal loader through
// /proc/self/fd/N. The loaded model's read-only mapping shares those pages (the weights are in
// memory once) and keeps the memory file alive: the memory is returned when the model goes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "model/importers/convert.h"
#include "model/importers/synth_model.h"
#include "model/weights.h"

namespace llamaserve {

struct SynthSpec {
  std::string shape;  // shapes.h name
  std::string type;   // file type name (file_types.h)
};

// "llama2-70b:f16" or "tiny:q4_k_m"; a shape alone ("llama2-7b") means f16. Both names are
// checked, and the error lists the known ones.
Result<SynthSpec> parse_synth_spec(std::string_view text);

// Tensor bytes of the model of `options` (the file less its header of a few MiB), before
// anything is written.
Result<uint64_t> synthetic_tensor_bytes(const SynthOptions& options);

// MemAvailable of /proc/meminfo, or nullopt where it cannot be read.
std::optional<uint64_t> available_memory_bytes();

// An error naming both sizes when `needed_bytes` exceeds `available_bytes`; ok when it does
// not, or when the available memory is unknown.
Status check_memory_for(std::string_view what, uint64_t needed_bytes,
                        std::optional<uint64_t> available_bytes);

struct InMemoryModel {
  std::shared_ptr<const LoadedModel> model;
  ConvertSummary summary;
  double synth_seconds = 0.0;  // writing the GGUF into memory
  double load_seconds = 0.0;   // load_model of the memory file (prefaulting included)
  int threads = 0;             // the threads that encoded the rows
};

// Writes the model of `options` (output_path unused; threads 0 = all cores) into a memory
// file and loads it with `load`. Refuses before writing anything when the file is larger than
// the memory available.
Result<InMemoryModel> synthesize_in_memory(const SynthOptions& options,
                                           const LoadOptions& load = {});

}  // namespace llamaserve
