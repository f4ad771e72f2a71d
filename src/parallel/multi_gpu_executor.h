// The executor over several GPUs of one host, behind the Executor interface: pp pipeline
// stages, each a tensor-parallel group of tp ranks (parallel_layout.h says which device runs
// which part). tp-only is one stage of tp ranks, pp-only pp stages of one rank.
//
//  - Pipeline (--pp N): consecutive layer blocks per stage (pipeline_split.h); the first stage
//    embeds, the last applies the head; each stage owns the KV blocks of its layers; hidden
//    rows pass device to device (peer copies where the devices allow, staged through the host
//    otherwise). A pass of many sequences runs as micro-batches in flight (micro_batches.h,
//    stage_pipeline.h): stage s works on one while stage s + 1 works on the one before; other
//    passes run through the stages in turn.
//  - Tensor parallel (--tp N): every rank of a stage holds a shard of the stage's layers
//    (tp_shard.h); the partial sums of the attention output and FFN down projections are
//    summed over the ranks as MultiGpuOptions::tp_sums says (rank_sum.h: NCCL, one
//    communicator per stage, and peer-to-peer reductions; one thread and stream per rank);
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
#include "executor/cuda_executor.h"
#include "executor/executor.h"
#include "executor/tp_sums.h"
#include "model/weights.h"

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
  // Pipeline: a pass runs as up to this many micro-batches of whole sequences in flight;
  // 0 = one per stage, 1 = never (every pass through the stages in turn). A pass is split only
  // where every micro-batch gets at least micro_batch_min_rows rows: below that a stage's time
  // is mostly the read of its weights, which every micro-batch repeats. Never where a device
  // serves two stages (they would only take turns on it, and NCCL communicators sharing a
  // device must not run at once).
  int32_t pipeline_micro_batches = 0;
  int32_t micro_batch_min_rows = 128;
  // Tensor parallelism: how the ranks of a stage sum their partials (each rank's
  // CudaExecutorOptions::rank_sum, rank_sum.h).
  TpSums tp_sums;
};

// What a pipeline executor has run as micro-batches in flight: passes, and the micro-batches
// they were split into.
struct PipelineCounters {
  uint64_t passes = 0;
  uint64_t micro_batches = 0;
};

// `base` gives every part's options except the device and its role.
Result<std::unique_ptr<Executor>> create_multi_gpu_executor(
    std::shared_ptr<const LoadedModel> model, const CudaExecutorOptions& base,
    const MultiGpuOptions& options);

// The counters of an executor that create_multi_gpu_executor made (zeros for any other).
// Safe to call while another thread runs passes.
PipelineCounters pipeline_counters(const Executor& executor);

}  // namespace llamaserve
