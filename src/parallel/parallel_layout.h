// Which device runs which part of one replica under tensor parallel × pipeline parallel: the
// device list in order, stage s taking devices [s tp, (s+1) tp); rank 0 of a stage is its
// primary (it adds the residual, and on the last stage computes the logits). Plain arithmetic,
// no CUDA: the multi-GPU executor builds its parts from it, and the CPU unit tests check it.
//
// tp-only is one stage of tp ranks, pp-only pp stages of one rank each.
#pragma once

#include <span>
#include <vector>

#include "core/status.h"

namespace llamaserve {

// A copy of the hidden rows between stages: stage `stage`'s input, read from rank 0 of the
// stage before (on `from_device`) into rank `rank` of this stage (on `to_device`).
struct StageHandoff {
  int stage = 0;
  int rank = 0;
  int from_device = 0;
  int to_device = 0;
};

struct ParallelLayout {
  int tensor_parallel = 1;
  int pipeline_parallel = 1;
  std::vector<int> devices;  // stage-major: rank r of stage s is devices[s * tensor_parallel + r]

  int device(int stage, int rank) const {
    return devices[static_cast<size_t>(stage * tensor_parallel + rank)];
  }
  std::vector<int> stage_devices(int stage) const;
  // Every copy a pass makes between stages, stage by stage, rank by rank (none for one stage).
  std::vector<StageHandoff> handoffs() const;
  // How many parts of the replica `device` holds: 1, or more where a device is listed in
  // several stages (tp 2 x pp 2 on two GPUs as "0,1,0,1", for tests).
  int parts_on(int device) const;
};

// Checks the layout: tp and pp >= 1, exactly tp * pp devices, none negative, and the ranks of a
// stage on distinct devices (NCCL refuses one device twice in a communicator). A device may
// appear in several stages.
Result<ParallelLayout> make_parallel_layout(std::span<const int> devices, int tensor_parallel,
                                            int pipeline_parallel);

}  // namespace llamaserve
