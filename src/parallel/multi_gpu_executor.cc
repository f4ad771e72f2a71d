#include "parallel/multi_gpu_executor.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <string_view>
#include <thread>
#include <utility>

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>
#include <spdlog/spdlog.h>

#include "backend/cuda/check.h"
#include "backend/cuda/peer_access.h"
#include "backend/cuda/peer_all_reduce.h"
#include "parallel/batch_pieces.h"
#include "parallel/batch_validation.h"
#include "parallel/pipeline_split.h"
#include "parallel/tp_shard.h"

namespace llamaserve {
namespace {

// With LLAMASERVE_TP_ALLREDUCE=peer: up to 8 rows of a 4096-wide hidden state (decode steps
// of small batches, where latency rules) through the peer-to-peer kernel; larger all-reduces
// are bandwidth-bound and NCCL's.
constexpr size_t kPeerAllReduceFloats = 32768;

// Creates every part, agrees on the smallest KV block count any of them can hold, then
// allocates and uploads each.
Result<std::vector<std::unique_ptr<CudaPart>>> create_parts(
    const std::vector<std::pair<std::shared_ptr<const LoadedModel>, CudaExecutorOptions>>& specs) {
  std::vector<std::unique_ptr<CudaPart>> parts;
  int32_t kv_blocks = 0;
  for (const auto& [model, options] : specs) {
    LS_ASSIGN_OR_RETURN(std::unique_ptr<CudaPart> part, CudaPart::create(model, options));
    auto blocks = part->plan_kv_blocks();
    if (!blocks.is_ok())
      return blocks.status().with_context(fmt::format("cuda:{}", options.device));
    kv_blocks = parts.empty() ? *blocks : std::min(kv_blocks, *blocks);
    parts.push_back(std::move(part));
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    Status status = parts[i]->init(kv_blocks);
    if (!status.is_ok()) return status.with_context(fmt::format("cuda:{}", specs[i].second.device));
  }
  return parts;
}

std::string join_described(const std::vector<std::unique_ptr<CudaPart>>& parts) {
  std::string out;
  for (const auto& part : parts) {
    out += fmt::format("\n  {}", part->executor().describe());
  }
  return out;
}

class PipelineExecutor final : public Executor {
 public:
  PipelineExecutor(std::shared_ptr<const LoadedModel> model,
                   std::vector<std::unique_ptr<CudaPart>> stages, int32_t max_rows,
                   std::string links)
      : model_(std::move(model)),
        stages_(std::move(stages)),
        max_rows_(max_rows),
        links_(std::move(links)) {}

  const ModelConfig& config() const override { return model_->config; }
  KvCacheInfo kv_info() const override {
    // Every stage has the same block count; a block spans all layers across the stages.
    KvCacheInfo info = stages_.front()->executor().kv_info();
    info.bytes_per_block = 0;
    for (const auto& stage : stages_)
      info.bytes_per_block += stage->executor().kv_info().bytes_per_block;
    return info;
  }
  std::string describe() const override {
    return fmt::format("pipeline of {} stages ({}):{}", stages_.size(), links_,
                       join_described(stages_));
  }

  Status forward(const Batch& batch, std::span<float> logits) override {
    const int64_t n_vocab = model_->config.n_vocab;
    LS_RETURN_IF_ERROR(validate_batch(batch, kv_info(), n_vocab, logits.size()));
    return run_in_pieces(
        batch, max_rows_, n_vocab, logits, pieces_,
        [&](const Batch& piece, std::span<float> piece_logits) -> Status {
          StageInput input;
          for (size_t s = 0; s < stages_.size(); ++s) {
            const bool last = s + 1 == stages_.size();
            LS_RETURN_IF_ERROR(stages_[s]->run_piece(piece, last ? piece_logits.data() : nullptr,
                                                     s == 0 ? nullptr : &input));
            input = stages_[s]->output(max_rows_);
          }
          return Status::ok();
        });
  }

 private:
  std::shared_ptr<const LoadedModel> model_;
  std::vector<std::unique_ptr<CudaPart>> stages_;
  int32_t max_rows_;
  std::string links_;
  PieceScratch pieces_;
};

// One thread per rank runs that rank's executor over the same batch; the NCCL all-reduces
// inside meet across the threads.
class TensorParallelExecutor final : public Executor {
 public:
  TensorParallelExecutor(std::shared_ptr<const LoadedModel> model, std::vector<int> devices,
                         std::vector<ncclComm_t> comms,
                         std::unique_ptr<cuda::PeerAllReduce> peer_all_reduce)
      : model_(std::move(model)),
        devices_(std::move(devices)),
        comms_(std::move(comms)),
        peer_all_reduce_(std::move(peer_all_reduce)) {}

  // Small tensors (decode rows) through the peer-to-peer kernel, the rest through NCCL.
  Status all_reduce(int rank, float* data, size_t count, cudaStream_t stream) const {
    if (peer_all_reduce_ && count <= peer_all_reduce_->capacity()) {
      return peer_all_reduce_->run(rank, data, count, stream);
    }
    LS_NCCL_CHECK(ncclAllReduce(data, data, count, ncclFloat, ncclSum,
                                comms_[static_cast<size_t>(rank)], stream));
    return Status::ok();
  }

  ~TensorParallelExecutor() override {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
    ranks_.clear();  // streams and graphs go before the communicators
    peer_all_reduce_.reset();
    if (aborted_) return;  // ncclCommAbort freed them
    for (size_t r = 0; r < comms_.size(); ++r) {
      if (cudaSetDevice(devices_[r]) == cudaSuccess) ncclCommDestroy(comms_[r]);
    }
  }

  void start(std::vector<std::unique_ptr<CudaPart>> ranks) {
    ranks_ = std::move(ranks);
    results_.resize(ranks_.size());
    for (size_t r = 0; r < ranks_.size(); ++r) workers_.emplace_back([this, r] { work(r); });
  }

  const ModelConfig& config() const override { return model_->config; }
  KvCacheInfo kv_info() const override {
    KvCacheInfo info = ranks_.front()->executor().kv_info();
    info.bytes_per_block *= static_cast<uint64_t>(ranks_.size());
    return info;
  }
  std::string describe() const override {
    return fmt::format("tensor parallel over {} GPUs (all-reduce: {}NCCL {}):{}", ranks_.size(),
                       peer_all_reduce_ ? fmt::format("peer-to-peer up to {} floats, then ",
                                                      peer_all_reduce_->capacity())
                                        : std::string(),
                       NCCL_VERSION_CODE, join_described(ranks_));
  }

  Status forward(const Batch& batch, std::span<float> logits) override {
    LS_RETURN_IF_ERROR(validate_batch(batch, kv_info(), model_->config.n_vocab, logits.size()));
    if (!broken_.is_ok()) return broken_;
    std::unique_lock lock(mutex_);
    batch_ = &batch;
    logits_ = logits;
    pending_ = static_cast<int>(ranks_.size());
    failed_ = false;
    ++generation_;
    wake_.notify_all();
    done_.wait(lock, [&] { return pending_ == 0 || failed_; });
    if (failed_ && pending_ > 0) {
      // A rank failed while the others may wait in a collective that will never complete:
      // abort the communicators so that they return, then wait for them.
      for (ncclComm_t comm : comms_) ncclCommAbort(comm);
      aborted_ = true;
      done_.wait(lock, [&] { return pending_ == 0; });
    }
    for (const Status& status : results_) {
      if (!status.is_ok()) {
        if (aborted_) broken_ = status.with_context("tensor parallel executor stopped");
        return status;
      }
    }
    return Status::ok();
  }

 private:
  void work(size_t r) {
    uint64_t seen = 0;
    while (true) {
      const Batch* batch;
      std::span<float> logits;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        batch = batch_;
        logits = r == 0 ? logits_ : std::span<float>();
      }
      Status status = ranks_[r]->executor().forward(*batch, logits);
      {
        std::lock_guard lock(mutex_);
        results_[r] = std::move(status);
        if (!results_[r].is_ok()) failed_ = true;
        --pending_;
      }
      done_.notify_all();
    }
  }

  std::shared_ptr<const LoadedModel> model_;
  std::vector<int> devices_;
  std::vector<ncclComm_t> comms_;
  std::unique_ptr<cuda::PeerAllReduce> peer_all_reduce_;
  std::vector<std::unique_ptr<CudaPart>> ranks_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  bool stop_ = false;
  uint64_t generation_ = 0;
  const Batch* batch_ = nullptr;
  std::span<float> logits_;
  int pending_ = 0;
  bool failed_ = false;
  bool aborted_ = false;
  std::vector<Status> results_;
  Status broken_;
};

// "peer 0->1 yes" per neighbouring pair, enabling access where possible.
Result<std::string> enable_peer_links(const std::vector<int>& devices) {
  std::string links;
  for (size_t i = 0; i + 1 < devices.size(); ++i) {
    LS_ASSIGN_OR_RETURN(const bool can, cuda::can_access_peer(devices[i + 1], devices[i]));
    if (can) LS_RETURN_IF_ERROR(cuda::enable_peer_access(devices[i + 1], devices[i]));
    links += fmt::format("{}cuda:{} -> cuda:{} {}", i ? ", " : "", devices[i], devices[i + 1],
                         can ? "peer-to-peer" : "staged through the host");
  }
  return links;
}

Result<std::unique_ptr<Executor>> create_pipeline(std::shared_ptr<const LoadedModel> model,
                                                  const CudaExecutorOptions& base,
                                                  const MultiGpuOptions& options) {
  LS_ASSIGN_OR_RETURN(const std::vector<LayerRange> ranges,
                      pipeline_layer_split(*model, options.pipeline_parallel, options.layer_split));
  std::vector<std::pair<std::shared_ptr<const LoadedModel>, CudaExecutorOptions>> specs;
  for (size_t s = 0; s < ranges.size(); ++s) {
    CudaExecutorOptions stage = base;
    stage.device = options.devices[s];
    stage.layers = ranges[s];
    spdlog::info("pipeline stage {} on cuda:{}: layers {}-{}{}{}, {:.2f} GiB of weights", s,
                 stage.device, ranges[s].begin, ranges[s].end - 1,
                 ranges[s].embeddings ? " + embeddings" : "", ranges[s].head ? " + head" : "",
                 static_cast<double>(range_weight_bytes(*model, ranges[s])) / (1 << 30));
    specs.emplace_back(model, stage);
  }
  LS_ASSIGN_OR_RETURN(std::string links, enable_peer_links(options.devices));
  spdlog::info("pipeline links: {}", links);
  LS_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<CudaPart>> stages, create_parts(specs));
  return std::unique_ptr<Executor>(std::make_unique<PipelineExecutor>(
      std::move(model), std::move(stages), base.max_batch_tokens, std::move(links)));
}

Result<std::unique_ptr<Executor>> create_tensor_parallel(std::shared_ptr<const LoadedModel> model,
                                                         const CudaExecutorOptions& base,
                                                         const MultiGpuOptions& options) {
  const int n = options.tensor_parallel;
  LS_RETURN_IF_ERROR(check_tensor_parallel(*model, n));
  // NVLink SHARP (multicast) stays off unless the operator asks for it.
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  std::vector<ncclComm_t> comms(static_cast<size_t>(n));
  LS_NCCL_CHECK(ncclCommInitAll(comms.data(), n, options.devices.data()));
  // LLAMASERVE_TP_ALLREDUCE=peer sends the small all-reduces through the peer-to-peer kernel.
  // Not the default: on the H200 pair it measured no faster than NCCL (bench/results,
  // 2026-11-29-h200x2-7b-f16-tp-pp.md).
  std::unique_ptr<cuda::PeerAllReduce> peer;
  const char* mode = std::getenv("LLAMASERVE_TP_ALLREDUCE");
  if (mode != nullptr && std::string_view(mode) == "peer") {
    auto group = cuda::PeerAllReduce::create(options.devices, kPeerAllReduceFloats);
    if (group.is_ok()) {
      peer = std::move(group).value();
    } else {
      spdlog::info("tensor parallel: every all-reduce through NCCL ({})",
                   group.status().to_string());
    }
  }
  auto executor =
      std::make_unique<TensorParallelExecutor>(model, options.devices, comms, std::move(peer));
  std::vector<std::pair<std::shared_ptr<const LoadedModel>, CudaExecutorOptions>> specs;
  for (int r = 0; r < n; ++r) {
    LS_ASSIGN_OR_RETURN(std::shared_ptr<const LoadedModel> shard,
                        tensor_parallel_shard(model, r, n));
    CudaExecutorOptions rank = base;
    rank.device = options.devices[static_cast<size_t>(r)];
    rank.primary_rank = r == 0;
    const TensorParallelExecutor* owner = executor.get();
    rank.all_reduce = [owner, r](float* data, size_t count, cudaStream_t stream) {
      return owner->all_reduce(r, data, count, stream);
    };
    spdlog::info(
        "tensor parallel rank {} on cuda:{}: {} of {} heads, {} of {} KV heads, {} of {} "
        "FFN columns",
        r, rank.device, shard->config.n_head, model->config.n_head, shard->config.n_head_kv,
        model->config.n_head_kv, shard->config.n_ff, model->config.n_ff);
    specs.emplace_back(std::move(shard), rank);
  }
  LS_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<CudaPart>> ranks, create_parts(specs));
  executor->start(std::move(ranks));
  return std::unique_ptr<Executor>(std::move(executor));
}

}  // namespace

Result<std::unique_ptr<Executor>> create_multi_gpu_executor(
    std::shared_ptr<const LoadedModel> model, const CudaExecutorOptions& base,
    const MultiGpuOptions& options) {
  if (!model)
    return make_error(StatusCode::kInvalidArgument, "create_multi_gpu_executor: no model");
  const int n = options.tensor_parallel * options.pipeline_parallel;
  if (options.tensor_parallel < 1 || options.pipeline_parallel < 1 ||
      static_cast<int>(options.devices.size()) != n) {
    return make_error(StatusCode::kInvalidArgument,
                      "tensor parallel {} x pipeline parallel {} need {} devices, {} given",
                      options.tensor_parallel, options.pipeline_parallel, n,
                      options.devices.size());
  }
  if (options.tensor_parallel > 1 && options.pipeline_parallel > 1) {
    return make_error(StatusCode::kUnsupported,
                      "tensor parallel and pipeline parallel together are not supported; use one "
                      "of them, and --replicas for more devices");
  }
  int visible = 0;
  LS_CUDA_CHECK(cudaGetDeviceCount(&visible));
  for (size_t i = 0; i < options.devices.size(); ++i) {
    if (options.devices[i] < 0 || options.devices[i] >= visible) {
      return make_error(StatusCode::kInvalidArgument, "CUDA device {} does not exist ({} visible)",
                        options.devices[i], visible);
    }
  }
  if (options.pipeline_parallel > 1) return create_pipeline(std::move(model), base, options);
  return create_tensor_parallel(std::move(model), base, options);
}

}  // namespace llamaserve
