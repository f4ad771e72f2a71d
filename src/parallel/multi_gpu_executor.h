// The executor over several GPUs of one host, behind the Executor interface: pp pipeline
// stages, each a tensor-parallel group of tp ranks (parallel_layout.h says which device runs
// which part). tp-only is one stage of tp ranks, pp-only pp stages of one rank.
//
//  - Pipeline (--pp N): consecutive layer blocks per stage (pipeline_split.h); the first stage
//    embeds, the last applies the head; each stage owns the KV blocks of its layers; hidden
//    rows pass device to device (peer copies where the devices allow, staged through the host
//    otherwise). A batch runs through the stages in turn.
//  - Tensor parallel (--tp N): every rank of a stage holds a shard of the stage's layers
//    (tp_shard.h); the partial sums of the attention output and FFN down projections are
//    all-reduced with NCCL (one communicator per stage, one thread and stream per rank);
//    embeddings and head are whole on every rank of the first / last stage and the primary
//    rank (rank 0) adds the residual and computes the logits.
//  - Both: a stage's output (the same on all its ranks after the last all-reduce) is read from
//    its primary rank into every rank of the next stage.
//
// All parts agree on one KV block count (the smallest any device's budget allows), so that a
// block id means the same slot everywhere. Built only with LLAMASERVE_CUDA.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "model/weights.h"
#include "parallel/cuda_executor.h"
#include "parallel/executor.h"

namespace llamaserve {

struct MultiGpuOptions {
  // tensor_parallel * pipeline_parallel CUDA ordinals, stage by stage: stage s runs on
  // devices [s * tensor_parallel, (s + 1) * tensor_parallel). The ranks of a stage need
  // distinct devices; a device may serve several stages (then its parts share
  // base.gpu_memory_utilization evenly; the server's device lists never repeat a device).
  std::vector<int> devices;
  int tensor_parallel = 1;
  int pipeline_parallel = 1;
  std::vector<int32_t> layer_split;  // pipeline: layers per stage; empty = balanced by bytes
};

// `base` gives every part's options except the device and its role.
Result<std::unique_ptr<Executor>> create_multi_gpu_executor(
    std::shared_ptr<const LoadedModel> model, const CudaExecutorOptions& base,
    const MultiGpuOptions& options);

}  // namespace llamaserve
