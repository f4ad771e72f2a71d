// LayerRange: the slice of a model one Backend runs for a Batch. A single-device executor
// runs everything; a pipeline stage runs its layers and only the first/last stage embed the
// tokens or apply the head.
#pragma once

#include <cstdint>

namespace llamaserve {

struct LayerRange {
  int32_t begin = 0;       // first decoder layer
  int32_t end = 0;         // one past the last decoder layer
  bool embeddings = true;  // look up token embeddings first (else the hidden state is input)
  bool head = true;        // final norm + output projection for batch.logit_rows at the end

  int32_t n_layers() const { return end - begin; }
};

}  // namespace llamaserve
