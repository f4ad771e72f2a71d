#include "parallel/multi_gpu_executor.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string_view>
#include <thread>
#include <utility>

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>
#include <spdlog/spdlog.h>

#include "backend/cuda/check.h"
#include "backend/cuda/cuda_state.h"
#include "backend/cuda/matvec.h"
#include "backend/cuda/peer_access.h"
#include "backend/cuda/peer_all_reduce.h"
#include "executor/batch_pieces.h"
#include "executor/batch_validation.h"
#include "executor/tp_sums.h"
#include "parallel/micro_batches.h"
#include "parallel/parallel_layout.h"
#include "parallel/pipeline_split.h"
#include "parallel/rank_barrier.h"
#include "parallel/rank_sum.h"
#include "parallel/stage_pipeline.h"
#include "parallel/tp_rank.h"
#include "parallel/tp_shard.h"

namespace llamaserve {
namespace {

using PartSpec = std::pair<std::shared_ptr<const LoadedModel>, CudaExecutorOptions>;

// Creates every part, agrees on the smallest KV block count any of them can hold, then
// allocates and uploads each.
Result<std::vector<std::unique_ptr<CudaPart>>> create_parts(const std::vector<PartSpec>& specs) {
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

std::string join_described(const std::vector<std::unique_ptr<CudaPart>>& parts,
                           std::string_view indent) {
  std::string out;
  for (const auto& part : parts) out += fmt::format("\n{}{}", indent, part->executor().describe());
  return out;
}

// One pipeline stage: its ranks run one piece together. A single rank runs on the caller's
// thread; several run one thread each (their NCCL all-reduces meet across the threads) on
// one communicator of the stage's devices. A rank that fails while the others may wait in a
// collective aborts the stage's communicator; the stage is then unusable (aborted()).
class Stage {
 public:
  Stage(std::vector<int> devices, std::vector<ncclComm_t> comms,
        std::unique_ptr<cuda::PeerAllReduce> peer_all_reduce, TpSumMode sums)
      : devices_(std::move(devices)),
        comms_(std::move(comms)),
        peer_all_reduce_(std::move(peer_all_reduce)),
        sums_(sums),
        barrier_(static_cast<int>(devices_.size())) {}
  Stage(const Stage&) = delete;
  Stage& operator=(const Stage&) = delete;

  ~Stage() {
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

  // PRECONDITION: ranks.size() == the devices given; rank r runs on devices[r].
  void start(std::vector<std::unique_ptr<CudaPart>> ranks) {
    ranks_ = std::move(ranks);
    results_.resize(ranks_.size());
    if (ranks_.size() == 1) return;
    for (size_t r = 0; r < ranks_.size(); ++r) workers_.emplace_back([this, r] { work(r); });
  }

  // How rank r sums its partials over the stage's ranks: the stage's mode, on its
  // communicator, peer-to-peer group and barrier. PRECONDITION: the stage has several ranks.
  std::shared_ptr<const cuda::RankSum> rank_sum(int rank, bool half_gemm_sums) {
    RankSumSetup setup;
    setup.rank = rank;
    setup.half_gemm_sums = half_gemm_sums;
    setup.comm = &comms_[static_cast<size_t>(rank)];
    setup.barrier = &barrier_;
    setup.peer = peer_all_reduce_.get();
    return make_rank_sum(sums_, setup);
  }

  const std::vector<std::unique_ptr<CudaPart>>& ranks() const { return ranks_; }
  bool aborted() const { return aborted_; }
  // The rows the next stage reads: the primary rank's hidden state.
  StageInput output(int32_t rows) const { return ranks_.front()->output(rows); }

  std::string describe_all_reduce() const {
    std::string peer;
    if (peer_all_reduce_ && sums_ == TpSumMode::kFused) {
      peer = fmt::format(
          "fused into the decode products up to {} floats, GEMM partials pulled peer to peer, "
          "else ",
          peer_all_reduce_->capacity());
    } else if (peer_all_reduce_) {
      peer = fmt::format("peer-to-peer up to {} floats, then ", peer_all_reduce_->capacity());
    }
    return fmt::format("all-reduce: {}NCCL {}", peer, NCCL_VERSION_CODE);
  }

  // Every rank runs `piece` (input rows from `input` unless null; logits from the primary rank
  // to `logits`, and tokens drawn there with `sampling` into `tokens`, where the stage has the
  // head). Returns when all are done, with the first failing rank's error.
  Status run(const Batch& piece, float* logits, const StageInput* input,
             std::span<const RowSampling> sampling = {}, std::span<int32_t> tokens = {}) {
    if (ranks_.size() == 1) {
      return ranks_.front()->run_piece(piece, logits, input, sampling, tokens);
    }
    std::unique_lock lock(mutex_);
    job_ = {&piece, logits, input, sampling, tokens};
    pending_ = static_cast<int>(ranks_.size());
    failed_ = false;
    ++generation_;
    wake_.notify_all();
    done_.wait(lock, [&] { return pending_ == 0 || failed_; });
    if (failed_ && pending_ > 0) {
      // A rank failed while the others may wait in a collective that will never complete:
      // abort the communicator (and the peer reductions) so that they return, then wait.
      barrier_.abort();
      if (peer_all_reduce_) peer_all_reduce_->abort();
      for (ncclComm_t comm : comms_) ncclCommAbort(comm);
      aborted_ = true;
      done_.wait(lock, [&] { return pending_ == 0; });
    }
    for (const Status& status : results_) {
      if (!status.is_ok()) return status;
    }
    return Status::ok();
  }

 private:
  struct Job {
    const Batch* piece = nullptr;
    float* logits = nullptr;
    const StageInput* input = nullptr;
    std::span<const RowSampling> sampling;
    std::span<int32_t> tokens;
  };

  void work(size_t r) {
    uint64_t seen = 0;
    while (true) {
      Job job;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
      }
      Status status =
          r == 0 ? ranks_[r]->run_piece(*job.piece, job.logits, job.input, job.sampling, job.tokens)
                 : ranks_[r]->run_piece(*job.piece, nullptr, job.input);
      {
        std::lock_guard lock(mutex_);
        results_[r] = std::move(status);
        if (!results_[r].is_ok()) failed_ = true;
        --pending_;
      }
      done_.notify_all();
    }
  }

  std::vector<int> devices_;
  std::vector<ncclComm_t> comms_;  // empty for a single rank
  std::unique_ptr<cuda::PeerAllReduce> peer_all_reduce_;
  TpSumMode sums_;
  RankBarrier barrier_;
  std::vector<std::unique_ptr<CudaPart>> ranks_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  bool stop_ = false;
  uint64_t generation_ = 0;
  Job job_;
  int pending_ = 0;
  bool failed_ = false;
  bool aborted_ = false;
  std::vector<Status> results_;
};

// How a pipeline splits its passes (MultiGpuOptions): up to max_count micro-batches of at
// least min_rows rows each; max_count 1: never. `note` says which for describe().
struct MicroBatching {
  int32_t max_count = 1;
  int32_t min_rows = 1;
  std::string note;
};

// A pass whose micro_batches.h split has several micro-batches runs them in flight, one thread
// per stage (stage_pipeline.h); any other runs through the stages in turn, piece by piece,
// on the caller's thread. In turn, stage s + 1 starts only once every rank of stage s has
// synchronized its stream, so two communicators on one device (a device listed in two
// stages) never have kernels in flight together, which NCCL needs of communicators sharing a
// device ("Using multiple NCCL communicators concurrently"): such layouts never split.
class MultiGpuExecutor final : public Executor {
 public:
  MultiGpuExecutor(std::shared_ptr<const LoadedModel> model, ParallelLayout layout,
                   std::vector<std::unique_ptr<Stage>> stages, int32_t max_rows, std::string links,
                   MicroBatching micro_batching)
      : model_(std::move(model)),
        layout_(std::move(layout)),
        stages_(std::move(stages)),
        max_rows_(max_rows),
        links_(std::move(links)),
        micro_batching_(std::move(micro_batching)) {
    if (micro_batching_.max_count > 1)
      pipeline_ = std::make_unique<StagePipeline>(static_cast<int>(stages_.size()));
  }

  PipelineCounters counters() const {
    return {passes_in_flight_.load(std::memory_order_relaxed),
            micro_batches_run_.load(std::memory_order_relaxed)};
  }

  const ModelConfig& config() const override { return model_->config; }
  KvCacheInfo kv_info() const override {
    // Every part has the same block count; a block spans all layers and KV heads of all parts.
    KvCacheInfo info = stages_.front()->ranks().front()->executor().kv_info();
    info.bytes_per_block = 0;
    for (const auto& stage : stages_) {
      for (const auto& part : stage->ranks())
        info.bytes_per_block += part->executor().kv_info().bytes_per_block;
    }
    return info;
  }

  std::string describe() const override {
    const int tp = layout_.tensor_parallel, pp = layout_.pipeline_parallel;
    if (pp == 1) {
      return fmt::format("tensor parallel over {} GPUs ({}):{}", tp,
                         stages_.front()->describe_all_reduce(),
                         join_described(stages_.front()->ranks(), "  "));
    }
    if (tp == 1) {
      std::string parts;
      for (const auto& stage : stages_) parts += join_described(stage->ranks(), "  ");
      return fmt::format("pipeline of {} stages ({}; {}):{}", pp, links_, micro_batching_.note,
                         parts);
    }
    std::string out =
        fmt::format("pipeline of {} stages, each tensor parallel over {} GPUs ({}; {}):", pp, tp,
                    links_, micro_batching_.note);
    for (size_t s = 0; s < stages_.size(); ++s) {
      out += fmt::format("\n  stage {} ({}):{}", s, stages_[s]->describe_all_reduce(),
                         join_described(stages_[s]->ranks(), "    "));
    }
    return out;
  }

  Status forward(const Batch& batch, std::span<float> logits) override {
    LS_RETURN_IF_ERROR(validate_batch(batch, kv_info(), model_->config.n_vocab, logits.size()));
    return run(batch, PassOutputs{logits, {}, {}});
  }

  // The last stage's primary rank holds the logits: it draws the tokens.
  bool samples_on_device() const override { return true; }
  Status forward_sampled(const Batch& batch, std::span<const RowSampling> sampling,
                         std::span<int32_t> tokens, std::span<float> logits) override {
    LS_RETURN_IF_ERROR(validate_sampled_batch(batch, kv_info(), model_->config.n_vocab, sampling,
                                              tokens, logits.size()));
    return run(batch, PassOutputs{logits, sampling, tokens});
  }

 private:
  Status run(const Batch& batch, const PassOutputs& out) {
    if (!broken_.is_ok()) return broken_;
    // Every part has the same limits: what one refuses, all would, possibly after another
    // already waits in a collective (which would end the executor).
    LS_RETURN_IF_ERROR(stages_.front()->ranks().front()->check_batch(batch));
    const MicroBatchSplit split =
        micro_batching_.max_count > 1
            ? plan_micro_batches(batch, micro_batching_.max_count, micro_batching_.min_rows)
            : MicroBatchSplit{};
    const Status status =
        split.count > 1 ? run_in_flight(batch, split, out) : run_in_turn(batch, out);
    if (!status.is_ok() &&
        std::any_of(stages_.begin(), stages_.end(), [](const auto& s) { return s->aborted(); })) {
      broken_ = status.with_context("tensor parallel executor stopped");
    }
    return status;
  }

  Status run_in_turn(const Batch& batch, const PassOutputs& out) {
    return run_in_pieces(batch, max_rows_, model_->config.n_vocab, out, pieces_,
                         [&](const Batch& piece, const PassOutputs& piece_out) -> Status {
                           StageInput input;
                           for (size_t s = 0; s < stages_.size(); ++s) {
                             const bool last = s + 1 == stages_.size();
                             float* piece_logits = last && !piece_out.logits.empty()
                                                       ? piece_out.logits.data()
                                                       : nullptr;
                             LS_RETURN_IF_ERROR(stages_[s]->run(
                                 piece, piece_logits, s == 0 ? nullptr : &input,
                                 last ? piece_out.sampling : std::span<const RowSampling>(),
                                 last ? piece_out.tokens : std::span<int32_t>()));
                             input = stages_[s]->output(max_rows_);
                           }
                           return Status::ok();
                         });
  }

  // The micro-batches (in pieces of at most max_rows_ rows) through the stage threads. Stage
  // s > 0 releases stage s - 1's output once all its ranks have copied it (StageInput::
  // on_copied), so stage s - 1 starts its next micro-batch while stage s computes.
  Status run_in_flight(const Batch& batch, const MicroBatchSplit& split, const PassOutputs& out) {
    const size_t n_units = build_micro_batches(batch, split, max_rows_, units_);
    if (unit_outputs_.size() < n_units) unit_outputs_.resize(n_units);
    for (size_t u = 0; u < n_units; ++u)
      unit_outputs_[u].prepare(units_[u], out, model_->config.n_vocab);
    const size_t last = stages_.size() - 1;
    LS_RETURN_IF_ERROR(pipeline_->run(
        static_cast<int32_t>(n_units),
        [&](int stage, int32_t u, const std::function<void()>& input_taken) -> Status {
          const size_t s = static_cast<size_t>(stage);
          const Batch& piece = units_[static_cast<size_t>(u)].batch;
          if (s == 0) return stages_[0]->run(piece, nullptr, nullptr);
          std::atomic<size_t> copies_left = stages_[s]->ranks().size();
          StageInput input = stages_[s - 1]->output(max_rows_);
          input.on_copied = [&] {
            if (copies_left.fetch_sub(1) == 1) input_taken();
          };
          if (s != last) return stages_[s]->run(piece, nullptr, &input);
          const PassOutputs& o = unit_outputs_[static_cast<size_t>(u)].out;
          return stages_[s]->run(piece, o.logits.empty() ? nullptr : o.logits.data(), &input,
                                 o.sampling, o.tokens);
        }));
    for (size_t u = 0; u < n_units; ++u) unit_outputs_[u].scatter(units_[u], out);
    passes_in_flight_.fetch_add(1, std::memory_order_relaxed);
    micro_batches_run_.fetch_add(static_cast<uint64_t>(split.count), std::memory_order_relaxed);
    return Status::ok();
  }

  std::shared_ptr<const LoadedModel> model_;
  ParallelLayout layout_;
  std::vector<std::unique_ptr<Stage>> stages_;
  int32_t max_rows_;
  std::string links_;
  MicroBatching micro_batching_;
  PieceScratch pieces_;
  std::vector<MicroBatch> units_;  // of the pass in flight
  std::vector<MicroBatchOutputs> unit_outputs_;
  std::atomic<uint64_t> passes_in_flight_{0}, micro_batches_run_{0};
  Status broken_;  // set once a stage aborted its communicator: every later pass fails
  std::unique_ptr<StagePipeline> pipeline_;  // with micro-batching; its threads end first
};

// One stage's communicator and, unless sums.mode is kNccl, its peer-to-peer group: room for
// kMaxMatvecRows rows of n_embd floats (the decode passes' fused reductions) and, with kFused,
// pulled sums of max_tokens rows of the GEMM partials' type (f16, bf16 for BF16 output
// projections, or fp32 without sums.half_gemm_sums). A stage of one rank needs neither.
Result<std::unique_ptr<Stage>> create_stage(std::vector<int> devices, const LoadedModel& model,
                                            int64_t max_tokens, const TpSums& tp_sums) {
  const int64_t n_embd = model.config.n_embd;
  const int n = static_cast<int>(devices.size());
  const TpSumMode sums = tp_sums.mode;
  if (n == 1) {
    return std::make_unique<Stage>(std::move(devices), std::vector<ncclComm_t>(), nullptr, sums);
  }
  std::vector<ncclComm_t> comms(static_cast<size_t>(n));
  LS_NCCL_CHECK(ncclCommInitAll(comms.data(), n, devices.data()));
  std::unique_ptr<cuda::PeerAllReduce> peer;
  if (sums != TpSumMode::kNccl) {
    const size_t capacity = static_cast<size_t>(cuda::kMaxMatvecRows * n_embd);
    size_t pull_slot_bytes = 0;
    cuda::SumType pull_type = cuda::SumType::kF32;
    if (sums == TpSumMode::kFused) {
      const bool half = tp_sums.half_gemm_sums;
      const bool bf16 =
          !model.weights.layers.empty() && model.weights.layers.front().wo.type == TensorType::BF16;
      pull_type = !half ? cuda::SumType::kF32 : bf16 ? cuda::SumType::kBF16 : cuda::SumType::kF16;
      pull_slot_bytes = static_cast<size_t>(max_tokens * cuda::padded_row(n_embd) *
                                            cuda::sum_type_bytes(pull_type));
    }
    auto group = cuda::PeerAllReduce::create(devices, capacity, pull_slot_bytes, pull_type);
    if (group.is_ok()) {
      peer = std::move(group).value();
    } else {
      spdlog::info("tensor parallel: every all-reduce through NCCL ({})",
                   group.status().to_string());
    }
  }
  return std::make_unique<Stage>(std::move(devices), std::move(comms), std::move(peer), sums);
}

// "cuda:0 -> cuda:1 peer-to-peer" per copy between stages, enabling access where possible.
Result<std::string> enable_stage_links(const ParallelLayout& layout) {
  std::string links;
  for (const StageHandoff& h : layout.handoffs()) {
    std::string how = "same device";
    if (h.from_device != h.to_device) {
      LS_ASSIGN_OR_RETURN(const bool can, cuda::can_access_peer(h.to_device, h.from_device));
      if (can) LS_RETURN_IF_ERROR(cuda::enable_peer_access(h.to_device, h.from_device));
      how = can ? "peer-to-peer" : "staged through the host";
    }
    links += fmt::format("{}cuda:{} -> cuda:{} {}", links.empty() ? "" : ", ", h.from_device,
                         h.to_device, how);
  }
  return links;
}

void log_part(const ParallelLayout& layout, int stage, int rank, const CudaExecutorOptions& part,
              const LoadedModel& full, const LoadedModel& shard) {
  const std::string heads = describe_shard(full, shard);
  if (layout.pipeline_parallel == 1) {
    spdlog::info("tensor parallel rank {} on cuda:{}: {}", rank, part.device, heads);
    return;
  }
  const LayerRange& range = *part.layers;
  const std::string layers =
      fmt::format("layers {}-{}{}{}, {:.2f} GiB of weights", range.begin, range.end - 1,
                  range.embeddings ? " + embeddings" : "", range.head ? " + head" : "",
                  static_cast<double>(range_weight_bytes(shard, range)) / (1 << 30));
  if (layout.tensor_parallel == 1) {
    spdlog::info("pipeline stage {} on cuda:{}: {}", stage, part.device, layers);
  } else {
    spdlog::info("pipeline stage {} rank {} on cuda:{}: {}; {}", stage, rank, part.device, layers,
                 heads);
  }
}

// The micro-batching of MultiGpuOptions for `layout`: off for one stage, and off (with a log
// line saying why) where a device serves two stages.
Result<MicroBatching> micro_batching(const ParallelLayout& layout, const MultiGpuOptions& options) {
  if (options.pipeline_micro_batches < 0 || options.pipeline_micro_batches > 64) {
    return make_error(StatusCode::kInvalidArgument,
                      "pipeline micro-batches = {} must be in [0, 64] (0: one per stage, 1: off)",
                      options.pipeline_micro_batches);
  }
  if (options.micro_batch_min_rows < 1) {
    return make_error(StatusCode::kInvalidArgument, "micro-batch minimum rows = {} must be >= 1",
                      options.micro_batch_min_rows);
  }
  MicroBatching m;
  m.max_count = options.pipeline_micro_batches == 0 ? layout.pipeline_parallel
                                                    : options.pipeline_micro_batches;
  m.min_rows = options.micro_batch_min_rows;
  if (layout.pipeline_parallel == 1) {
    m.max_count = 1;
    return m;
  }
  m.note = "micro-batches off";
  if (m.max_count == 1) return m;
  for (const int device : layout.devices) {
    if (layout.parts_on(device) > 1) {
      spdlog::info(
          "pipeline: micro-batches off: cuda:{} serves two stages, which would only take turns "
          "on it (and NCCL communicators that share a device must not run at once)",
          device);
      m.max_count = 1;
      m.note = fmt::format("micro-batches off: cuda:{} serves two stages", device);
      return m;
    }
  }
  m.note = fmt::format("up to {} micro-batches in flight, {}+ rows each", m.max_count, m.min_rows);
  spdlog::info("pipeline: {}", m.note);
  return m;
}

}  // namespace

PipelineCounters pipeline_counters(const Executor& executor) {
  const auto* multi = dynamic_cast<const MultiGpuExecutor*>(&executor);
  return multi != nullptr ? multi->counters() : PipelineCounters{};
}

Result<std::unique_ptr<Executor>> create_multi_gpu_executor(
    std::shared_ptr<const LoadedModel> model, const CudaExecutorOptions& base,
    const MultiGpuOptions& options) {
  if (!model)
    return make_error(StatusCode::kInvalidArgument, "create_multi_gpu_executor: no model");
  LS_ASSIGN_OR_RETURN(
      const ParallelLayout layout,
      make_parallel_layout(options.devices, options.tensor_parallel, options.pipeline_parallel));
  int visible = 0;
  LS_CUDA_CHECK(cudaGetDeviceCount(&visible));
  for (int device : layout.devices) {
    if (device >= visible) {
      return make_error(StatusCode::kInvalidArgument, "CUDA device {} does not exist ({} visible)",
                        device, visible);
    }
  }
  const int tp = layout.tensor_parallel, pp = layout.pipeline_parallel;
  LS_ASSIGN_OR_RETURN(MicroBatching micro, micro_batching(layout, options));

  // Rank r holds the same shard in every stage (each stage uploads its layers of it).
  std::vector<std::shared_ptr<const LoadedModel>> shards;
  if (tp == 1) {
    shards.push_back(model);
  } else {
    LS_RETURN_IF_ERROR(check_tensor_parallel(*model, tp));
    for (int r = 0; r < tp; ++r) {
      LS_ASSIGN_OR_RETURN(std::shared_ptr<const LoadedModel> shard,
                          tensor_parallel_shard(model, r, tp));
      shards.push_back(std::move(shard));
    }
    keep_nvls_off_by_default();
  }
  // Balanced by what one device of a stage holds: rank 0's shard of its layers.
  std::vector<LayerRange> ranges;
  if (pp > 1) {
    LS_ASSIGN_OR_RETURN(ranges, pipeline_layer_split(*shards.front(), pp, options.layer_split));
  }

  std::vector<std::unique_ptr<Stage>> stages;
  for (int s = 0; s < pp; ++s) {
    auto stage =
        create_stage(layout.stage_devices(s), *model, base.max_batch_tokens, options.tp_sums);
    if (!stage.is_ok()) {
      if (pp == 1) return stage.status();
      return stage.status().with_context(
          fmt::format("pipeline stage {} (cuda:{})", s, fmt::join(layout.stage_devices(s), ",")));
    }
    stages.push_back(std::move(stage).value());
  }
  std::string links;
  if (pp > 1) {
    LS_ASSIGN_OR_RETURN(links, enable_stage_links(layout));
    spdlog::info("pipeline links: {}", links);
  }

  std::vector<PartSpec> specs;
  for (int s = 0; s < pp; ++s) {
    for (int r = 0; r < tp; ++r) {
      CudaExecutorOptions part = base;
      part.device = layout.device(s, r);
      if (pp > 1) part.layers = ranges[static_cast<size_t>(s)];
      if (tp > 1) {
        part.rank_sum = stages[static_cast<size_t>(s)]->rank_sum(r, options.tp_sums.half_gemm_sums);
      }
      // Parts on one device plan before any of them allocates: each gets its share.
      const int sharing = layout.parts_on(part.device);
      if (sharing > 1) {
        part.gpu_memory_utilization = base.gpu_memory_utilization / sharing;
        const bool first = std::find(layout.devices.begin(), layout.devices.end(), part.device) ==
                           layout.devices.begin() + (s * tp + r);
        if (first) {
          spdlog::info("cuda:{} holds {} parts: each plans against {:.0f}% of it", part.device,
                       sharing, 100.0 * part.gpu_memory_utilization);
        }
      }
      const auto& shard = shards[static_cast<size_t>(r)];
      log_part(layout, s, r, part, *model, *shard);
      specs.emplace_back(shard, part);
    }
  }
  LS_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<CudaPart>> parts, create_parts(specs));
  for (int s = 0; s < pp; ++s) {
    std::vector<std::unique_ptr<CudaPart>> ranks;
    for (int r = 0; r < tp; ++r) ranks.push_back(std::move(parts[static_cast<size_t>(s * tp + r)]));
    stages[static_cast<size_t>(s)]->start(std::move(ranks));
  }
  return std::unique_ptr<Executor>(std::make_unique<MultiGpuExecutor>(
      std::move(model), layout, std::move(stages), base.max_batch_tokens, std::move(links),
      std::move(micro)));
}

}  // namespace llamaserve
