// Executors over several GPUs of one host, behind the Executor interface:
//
//  - Pipeline (--pp N): consecutive layer blocks on consecutive devices (pipeline_split.h);
//    the first stage embeds, the last applies the head; each stage owns the KV blocks of its
//    layers; hidden rows pass device to device (peer copies where the devices allow, staged
//    through the host otherwise). A batch runs through the stages in turn.
//  - Tensor parallel (--tp N): every rank holds a shard of every layer (tp_shard.h); the
//    partial sums of the attention output and FFN down projections are all-reduced with NCCL
//    (one communicator, one thread and stream per device); embeddings and head are whole on
//    every rank and the primary rank computes the logits.
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
  std::vector<int> devices;  // tensor_parallel * pipeline_parallel CUDA ordinals
  int tensor_parallel = 1;
  int pipeline_parallel = 1;
  std::vector<int32_t> layer_split;  // pipeline: layers per stage; empty = balanced by bytes
};

// `base` gives every part's options except the device and its role. One of tensor_parallel
// and pipeline_parallel must be 1.
Result<std::unique_ptr<Executor>> create_multi_gpu_executor(
    std::shared_ptr<const LoadedModel> model, const CudaExecutorOptions& base,
    const MultiGpuOptions& options);

}  // namespace llamaserve
