#include "parallel/pipeline_split.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

namespace llamaserve {
namespace {

std::vector<LayerRange> ranges_from_counts(std::span<const int32_t> counts) {
  std::vector<LayerRange> ranges;
  int32_t begin = 0;
  for (size_t s = 0; s < counts.size(); ++s) {
    ranges.push_back({begin, begin + counts[s], s == 0, s + 1 == counts.size()});
    begin += counts[s];
  }
  return ranges;
}

}  // namespace

uint64_t range_weight_bytes(const LoadedModel& model, const LayerRange& range) {
  const ModelWeights& w = model.weights;
  uint64_t total = 0;
  if (range.embeddings) total += w.token_embd.n_bytes;
  if (range.head) {
    total += w.output_norm.n_bytes;
    // A tied head is the embedding matrix: on a device without the embeddings it is a copy.
    if (!model.config.tied_output || !range.embeddings) total += w.output.n_bytes;
  }
  for (int32_t i = range.begin; i < range.end; ++i) {
    total += layer_weight_bytes(w.layers[static_cast<size_t>(i)]);
  }
  return total;
}

Result<std::vector<LayerRange>> pipeline_layer_split(const LoadedModel& model, int stages,
                                                     std::span<const int32_t> requested) {
  const auto n_layer = static_cast<int32_t>(model.weights.layers.size());
  if (stages < 1 || stages > n_layer) {
    return make_error(StatusCode::kInvalidArgument,
                      "pipeline parallel {}: a {}-layer model splits into 1 to {} stages", stages,
                      n_layer, n_layer);
  }
  if (!requested.empty()) {
    if (static_cast<int>(requested.size()) != stages) {
      return make_error(StatusCode::kInvalidArgument,
                        "--layer-split lists {} stages, pipeline parallel is {}", requested.size(),
                        stages);
    }
    int64_t sum = 0;
    for (int32_t n : requested) {
      if (n < 1) {
        return make_error(StatusCode::kInvalidArgument,
                          "--layer-split {}: every stage needs at least one layer",
                          fmt::join(requested, ","));
      }
      sum += n;
    }
    if (sum != n_layer) {
      return make_error(StatusCode::kInvalidArgument,
                        "--layer-split {} adds up to {} layers; the model has {}",
                        fmt::join(requested, ","), sum, n_layer);
    }
    return ranges_from_counts(requested);
  }
  // Minimise the largest stage: every split of n_layer into `stages` blocks is too many for
  // 80 layers and 8 stages, but the best largest stage can be searched: for a bound B, fill
  // stages greedily; the smallest B that fits is found by bisection over the byte totals.
  std::vector<uint64_t> bytes(static_cast<size_t>(n_layer));
  for (int32_t i = 0; i < n_layer; ++i)
    bytes[static_cast<size_t>(i)] =
        layer_weight_bytes(model.weights.layers[static_cast<size_t>(i)]);
  const uint64_t head = range_weight_bytes(model, {0, 0, false, true});
  const uint64_t embeddings = model.weights.token_embd.n_bytes;
  auto fill = [&](uint64_t bound, std::vector<int32_t>& counts) {
    counts.assign(static_cast<size_t>(stages), 0);
    int32_t layer = 0;
    for (int s = 0; s < stages; ++s) {
      uint64_t load = (s == 0 ? embeddings : 0) + (s + 1 == stages ? head : 0);
      const int32_t must_leave = stages - s - 1;  // at least one layer per later stage
      while (layer < n_layer - must_leave) {
        const bool first = counts[static_cast<size_t>(s)] == 0;
        if (!first && load + bytes[static_cast<size_t>(layer)] > bound && s + 1 < stages) break;
        load += bytes[static_cast<size_t>(layer)];
        ++counts[static_cast<size_t>(s)];
        ++layer;
      }
      if (load > bound) return false;
    }
    return layer == n_layer;
  };
  uint64_t lo = 0, hi = std::numeric_limits<uint64_t>::max() / 2;
  std::vector<int32_t> counts, best;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (fill(mid, counts)) {
      hi = mid;
      best = counts;
    } else {
      lo = mid + 1;
    }
  }
  if (best.empty() && !fill(hi, best)) {
    return make_error(StatusCode::kInternal, "no pipeline split of {} layers into {} stages",
                      n_layer, stages);
  }
  if (fill(lo, counts)) best = counts;
  return ranges_from_counts(best);
}

}  // namespace llamaserve
