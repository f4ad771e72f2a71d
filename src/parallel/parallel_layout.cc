#include "parallel/parallel_layout.h"

#include <algorithm>

#include <fmt/format.h>

namespace llamaserve {

std::vector<int> ParallelLayout::stage_devices(int stage) const {
  const auto first = devices.begin() + static_cast<std::ptrdiff_t>(stage) * tensor_parallel;
  return std::vector<int>(first, first + tensor_parallel);
}

std::vector<StageHandoff> ParallelLayout::handoffs() const {
  std::vector<StageHandoff> out;
  for (int s = 1; s < pipeline_parallel; ++s) {
    for (int r = 0; r < tensor_parallel; ++r) out.push_back({s, r, device(s - 1, 0), device(s, r)});
  }
  return out;
}

int ParallelLayout::parts_on(int device) const {
  return static_cast<int>(std::count(devices.begin(), devices.end(), device));
}

Result<ParallelLayout> make_parallel_layout(std::span<const int> devices, int tensor_parallel,
                                            int pipeline_parallel) {
  if (tensor_parallel < 1 || pipeline_parallel < 1) {
    return make_error(StatusCode::kInvalidArgument,
                      "tensor parallel ({}) and pipeline parallel ({}) must be >= 1",
                      tensor_parallel, pipeline_parallel);
  }
  const int64_t needed = static_cast<int64_t>(tensor_parallel) * pipeline_parallel;
  if (static_cast<int64_t>(devices.size()) != needed) {
    return make_error(StatusCode::kInvalidArgument,
                      "tensor parallel {} x pipeline parallel {} need {} devices, {} given",
                      tensor_parallel, pipeline_parallel, needed, devices.size());
  }
  ParallelLayout layout;
  layout.tensor_parallel = tensor_parallel;
  layout.pipeline_parallel = pipeline_parallel;
  layout.devices.assign(devices.begin(), devices.end());
  for (int device : layout.devices) {
    if (device < 0) {
      return make_error(StatusCode::kInvalidArgument, "device index {} is negative", device);
    }
  }
  for (int s = 0; s < pipeline_parallel; ++s) {
    const std::vector<int> stage = layout.stage_devices(s);
    for (size_t r = 0; r < stage.size(); ++r) {
      if (std::find(stage.begin(), stage.begin() + static_cast<std::ptrdiff_t>(r), stage[r]) !=
          stage.begin() + static_cast<std::ptrdiff_t>(r)) {
        return make_error(StatusCode::kInvalidArgument,
                          "pipeline stage {} (devices {}) has cuda:{} twice: the ranks of a "
                          "tensor-parallel group need distinct devices",
                          s, fmt::join(stage, ","), stage[r]);
      }
    }
  }
  return layout;
}

}  // namespace llamaserve
