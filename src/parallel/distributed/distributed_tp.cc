#include "parallel/distributed/distributed_tp.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>
#include <spdlog/spdlog.h>

#include "backend/cuda/check.h"
#include "executor/batch_pieces.h"
#include "executor/batch_validation.h"
#include "parallel/distributed/model_fingerprint.h"
#include "parallel/rank_sum.h"
#include "parallel/tp_rank.h"
#include "parallel/tp_shard.h"

namespace llamaserve {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kGoodbyeTimeout{30000};

static_assert(sizeof(ncclUniqueId) == kTpCommIdBytes, "the NCCL id travels as 128 bytes");

// The options every rank's part must share, as rank 0 sends them, and back.
TpSetup setup_of(const CudaExecutorOptions& o, bool half_gemm_sums) {
  TpSetup s;
  s.kv_block_size = o.kv_block_size;
  s.max_batch_tokens = o.max_batch_tokens;
  s.max_seqs = o.max_seqs;
  s.max_context_tokens = o.max_context_tokens;
  s.kv_capacity_tokens = o.kv_capacity_tokens;
  s.gemm_min_rows = o.gemm_min_rows;
  s.float_gemm_min_rows = o.float_gemm_min_rows;
  s.cuda_graphs = o.cuda_graphs;
  s.half_gemm_sums = half_gemm_sums;
  s.kv_q8_0 = o.kv_type == TensorType::Q8_0;
  return s;
}

void apply_setup(const TpSetup& s, CudaExecutorOptions& o) {
  o.kv_block_size = s.kv_block_size;
  o.max_batch_tokens = s.max_batch_tokens;
  o.max_seqs = s.max_seqs;
  o.max_context_tokens = s.max_context_tokens;
  o.kv_capacity_tokens = s.kv_capacity_tokens;
  o.gemm_min_rows = s.gemm_min_rows;
  o.float_gemm_min_rows = s.float_gemm_min_rows;
  o.cuda_graphs = s.cuda_graphs;
  o.kv_type = s.kv_q8_0 ? TensorType::Q8_0 : TensorType::F16;
}

// One rank's NCCL communicator. The part's sums read it, so it exists (empty) before the part
// and is filled in once every rank holds its weights.
struct NcclComm {
  explicit NcclComm(int device) : device(device) {}
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  ~NcclComm() { finish(/*clean=*/false); }

  Status init(const TpCommId& id, int world, int rank) {
    LS_CUDA_CHECK(cudaSetDevice(device));
    ncclUniqueId unique;
    std::memcpy(&unique, id.data(), sizeof(unique));
    LS_NCCL_CHECK(ncclCommInitRank(&comm, world, unique, rank));
    return Status::ok();
  }
  // Makes a pass that waits in a collective return (with an error). Safe from another thread;
  // only the first call aborts.
  void abort() {
    if (comm == nullptr || aborted.exchange(true)) return;
    ncclCommAbort(comm);
  }
  // ncclCommDestroy after every rank said goodbye; otherwise ncclCommAbort, which never waits
  // for a rank that may be gone. Nothing once abort() has begun.
  void finish(bool clean) {
    if (comm == nullptr || aborted.exchange(true)) return;
    if (cudaSetDevice(device) == cudaSuccess) {
      clean ? ncclCommDestroy(comm) : ncclCommAbort(comm);
    }
  }

  // How rank `rank`'s part sums its partials: NCCL alone, on this communicator (kept alive
  // with the part).
  static std::shared_ptr<const cuda::RankSum> rank_sum(std::shared_ptr<NcclComm> self, int rank,
                                                       bool half_gemm_sums) {
    RankSumSetup setup;
    setup.rank = rank;
    setup.half_gemm_sums = half_gemm_sums;
    setup.comm = &self->comm;
    setup.comm_owner = std::move(self);
    return make_rank_sum(TpSumMode::kNccl, setup);
  }

  int device;
  ncclComm_t comm = nullptr;
  std::atomic<bool> aborted{false};
};

// Runs a rank's own share of each pass on a thread of its own, so that the thread that talks
// to the other ranks can watch them meanwhile (and abort the communicator when one fails):
// start() hands a pass over, done_fd() (an eventfd) turns readable when it has finished, and
// wait() returns its outcome.
class PassThread {
 public:
  static Result<std::unique_ptr<PassThread>> create() {
    const int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (fd < 0) {
      return make_error(StatusCode::kInternal, "eventfd: {}", std::strerror(errno));
    }
    return std::unique_ptr<PassThread>(new PassThread(fd));
  }
  ~PassThread() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
    ::close(done_fd_);
  }

  int done_fd() const { return done_fd_; }

  // PRECONDITION: the previous pass was waited for.
  void start(std::function<Status()> pass) {
    {
      std::lock_guard lock(mutex_);
      job_ = std::move(pass);
      finished_ = false;
    }
    wake_.notify_all();
  }

  // True once the pass has finished, waiting at most `timeout` for it.
  bool finished_within(milliseconds timeout) {
    std::unique_lock lock(mutex_);
    return done_.wait_for(lock, timeout, [&] { return finished_; });
  }

  // Blocks until the pass has finished; its outcome (again on later calls).
  Status wait() {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return finished_; });
    uint64_t count = 0;
    (void)!::read(done_fd_, &count, sizeof(count));  // back to not readable
    return result_;
  }

 private:
  explicit PassThread(int done_fd) : done_fd_(done_fd), thread_([this] { loop(); }) {}

  void loop() {
    std::unique_lock lock(mutex_);
    while (true) {
      wake_.wait(lock, [&] { return stop_ || job_ != nullptr; });
      if (stop_) return;
      std::function<Status()> job = std::move(job_);
      job_ = nullptr;
      lock.unlock();
      Status status = job();
      lock.lock();
      result_ = std::move(status);
      finished_ = true;
      const uint64_t one = 1;
      (void)!::write(done_fd_, &one, sizeof(one));
      done_.notify_all();
    }
  }

  int done_fd_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::function<Status()> job_;
  bool finished_ = true;
  bool stop_ = false;
  Status result_;
  std::thread thread_;  // last: starts once the members it uses exist
};

// A rank's pass may wait in a collective that will never complete (another rank is gone):
// aborts the communicator, on a thread of its own since ncclCommAbort itself can block, and
// waits up to kAbortGrace for the pass to return. False when it did not: the pass thread, the
// part and the communicator are then stuck in the driver for good, and the caller must leave
// them to the process exit (joining or freeing them would hang too).
constexpr milliseconds kAbortGrace{10000};

bool abort_pass(const std::shared_ptr<NcclComm>& comm, PassThread& pass) {
  std::thread([comm] { comm->abort(); }).detach();
  if (pass.finished_within(kAbortGrace)) {
    (void)pass.wait();
    return true;
  }
  spdlog::error(
      "tensor parallel: the pass on cuda:{} did not return within {} ms of aborting the NCCL "
      "communicator; its thread and device memory stay with the process until it exits",
      comm->device, kAbortGrace.count());
  return false;
}

std::string origin_of(int device) {
  char host[256] = "unknown-host";
  gethostname(host, sizeof(host) - 1);
  return fmt::format("{} pid {} cuda:{}", host, getpid(), device);
}

class DistributedTpExecutor final : public Executor {
 public:
  DistributedTpExecutor(std::shared_ptr<const LoadedModel> model, int world, int device,
                        std::unique_ptr<CudaPart> part, std::shared_ptr<NcclComm> comm,
                        std::unique_ptr<TpCoordinator> coordinator,
                        std::unique_ptr<PassThread> pass, int32_t max_rows,
                        milliseconds step_timeout)
      : model_(std::move(model)),
        world_(world),
        device_(device),
        part_(std::move(part)),
        comm_(std::move(comm)),
        coordinator_(std::move(coordinator)),
        pass_(std::move(pass)),
        max_rows_(max_rows),
        step_timeout_(step_timeout) {}

  ~DistributedTpExecutor() override {
    if (stuck_) {
      // abort_pass: nothing of the group can be joined or freed any more (the part's sums keep
      // the communicator from being finished).
      (void)pass_.release();
      (void)part_.release();
      return;
    }
    pass_.reset();  // no pass runs between calls
    bool clean = false;
    if (broken_.is_ok()) {
      const Status goodbye = coordinator_->shutdown(tp_deadline_after(kGoodbyeTimeout));
      clean = goodbye.is_ok();
      if (!clean) spdlog::warn("tensor parallel: {}", goodbye.to_string());
    }
    part_.reset();  // streams and graphs go before the communicator
    comm_->finish(clean);
  }

  const ModelConfig& config() const override { return model_->config; }
  KvCacheInfo kv_info() const override {
    // Every rank holds the same block count, and a shard of the same size.
    KvCacheInfo info = part_->executor().kv_info();
    info.bytes_per_block *= static_cast<uint64_t>(world_);
    return info;
  }
  std::string describe() const override {
    std::string out = fmt::format(
        "tensor parallel over {} processes, one GPU each (all-reduce: NCCL {}):\n  rank 0: {}",
        world_, NCCL_VERSION_CODE, part_->executor().describe());
    for (const std::string& rank : coordinator_->describe_ranks()) out += "\n  " + rank;
    return out;
  }

  Status forward(const Batch& batch, std::span<float> logits) override {
    LS_RETURN_IF_ERROR(validate_batch(batch, kv_info(), model_->config.n_vocab, logits.size()));
    return run(batch, PassOutputs{logits, {}, {}});
  }

  bool samples_on_device() const override { return true; }
  Status forward_sampled(const Batch& batch, std::span<const RowSampling> sampling,
                         std::span<int32_t> tokens, std::span<float> logits) override {
    LS_RETURN_IF_ERROR(validate_sampled_batch(batch, kv_info(), model_->config.n_vocab, sampling,
                                              tokens, logits.size()));
    return run(batch, PassOutputs{logits, sampling, tokens});
  }

 private:
  // The batch to every rank, rank 0's own pieces on the pass thread, then every rank's status.
  // The other ranks cut the batch into the same pieces (run_tp_worker).
  Status run(const Batch& batch, const PassOutputs& out) {
    if (!broken_.is_ok()) return broken_;
    // The other ranks have rank 0's limits: a batch they would refuse is refused here, before
    // any rank waits in a collective for one that did.
    LS_RETURN_IF_ERROR(part_->check_batch(batch));
    step_ = step_ == UINT32_MAX ? 1 : step_ + 1;
    Status sent = coordinator_->send_batch(step_, batch);
    if (!sent.is_ok()) {
      // Either the batch cannot be framed (nothing was sent: only this pass fails) or a rank
      // is gone (the group failed; a rank that got the batch was told to stop).
      if (coordinator_->failure().is_ok()) return sent;
      return stop(coordinator_->failure());
    }
    pass_->start([this, &batch, &out] {
      return run_in_pieces(
          batch, max_rows_, model_->config.n_vocab, out, pieces_,
          [&](const Batch& piece, const PassOutputs& piece_out) {
            float* logits = piece_out.logits.empty() ? nullptr : piece_out.logits.data();
            return part_->run_piece(piece, logits, nullptr, piece_out.sampling, piece_out.tokens);
          });
    });
    const Status status = coordinator_->await_step(
        step_, pass_->done_fd(), [this] { return pass_->wait(); },
        tp_deadline_after(step_timeout_));
    if (status.is_ok()) return status;
    return stop(status);
  }

  // The group has failed: rank 0's pass may wait in a collective that will never complete, so
  // the communicator is aborted; then every later pass fails with the reason.
  Status stop(const Status& reason) {
    spdlog::error("tensor parallel: {}; aborting the NCCL communicator", reason.to_string());
    stuck_ = !abort_pass(comm_, *pass_);
    broken_ = reason.with_context(fmt::format(
        "tensor-parallel group of {} processes stopped (rank 0 on cuda:{})", world_, device_));
    spdlog::error("{}", broken_.to_string());
    return broken_;
  }

  std::shared_ptr<const LoadedModel> model_;
  int world_;
  int device_;
  std::unique_ptr<CudaPart> part_;
  std::shared_ptr<NcclComm> comm_;
  std::unique_ptr<TpCoordinator> coordinator_;
  std::unique_ptr<PassThread> pass_;
  int32_t max_rows_;
  milliseconds step_timeout_;
  PieceScratch pieces_;
  uint32_t step_ = 0;
  Status broken_;
  bool stuck_ = false;  // abort_pass gave up on the pass thread
};

Status check_group(int rank, int world, int device) {
  if (world < 2 || world > kTpMaxWorld) {
    return make_error(StatusCode::kInvalidArgument,
                      "a tensor-parallel group of processes needs 2 to {} ranks, not {}",
                      kTpMaxWorld, world);
  }
  if (rank < 0 || rank >= world) {
    return make_error(StatusCode::kInvalidArgument, "rank {} outside [0, {}]", rank, world - 1);
  }
  int visible = 0;
  LS_CUDA_CHECK(cudaGetDeviceCount(&visible));
  if (device < 0 || device >= visible) {
    return make_error(StatusCode::kInvalidArgument, "CUDA device {} does not exist ({} visible)",
                      device, visible);
  }
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Executor>> create_distributed_tp_executor(
    std::shared_ptr<const LoadedModel> model, const CudaExecutorOptions& base,
    const DistributedTpOptions& options) {
  if (!model) {
    return make_error(StatusCode::kInvalidArgument, "create_distributed_tp_executor: no model");
  }
  const int world = options.world, device = options.device;
  LS_RETURN_IF_ERROR(check_group(0, world, device));
  LS_RETURN_IF_ERROR(check_tensor_parallel(*model, world));
  LS_ASSIGN_OR_RETURN(std::shared_ptr<const LoadedModel> shard,
                      tensor_parallel_shard(model, 0, world));
  keep_nvls_off_by_default();
  auto comm = std::make_shared<NcclComm>(device);
  CudaExecutorOptions part_options = base;
  part_options.device = device;
  part_options.layers.reset();
  part_options.rank_sum = NcclComm::rank_sum(comm, 0, options.half_gemm_sums);
  LS_ASSIGN_OR_RETURN(std::unique_ptr<CudaPart> part, CudaPart::create(shard, part_options));
  LS_ASSIGN_OR_RETURN(std::unique_ptr<PassThread> pass, PassThread::create());

  LS_ASSIGN_OR_RETURN(std::unique_ptr<TpCoordinator> coordinator,
                      TpCoordinator::listen(options.listen_host, options.port));
  spdlog::info("tensor parallel rank 0 of {} on cuda:{}: {}; waiting for ranks 1-{} on port {}",
               world, device, describe_shard(*model, *shard), world - 1, coordinator->port());
  if (options.on_listening) options.on_listening(coordinator->port());
  auto deadline = [&] { return tp_deadline_after(options.rendezvous_timeout); };
  // From here every failure of rank 0 is also every other rank's: they hear it.
  auto give_up = [&](const Status& status) {
    coordinator->fail(status);
    return status;
  };
  const TpGroupConfig group{world, model_fingerprint(*model),
                            setup_of(part_options, options.half_gemm_sums)};
  LS_RETURN_IF_ERROR(coordinator->accept_ranks(group, deadline()));

  auto own_blocks = part->plan_kv_blocks();
  if (!own_blocks.is_ok()) {
    return give_up(own_blocks.status().with_context(fmt::format("rank 0 (cuda:{})", device)));
  }
  LS_ASSIGN_OR_RETURN(const std::vector<int64_t> blocks,
                      coordinator->gather("planning the KV cache", deadline()));
  int64_t kv_blocks = *own_blocks;
  for (size_t r = 1; r < blocks.size(); ++r) kv_blocks = std::min(kv_blocks, blocks[r]);
  if (kv_blocks < 1) {
    return give_up(make_error(StatusCode::kResourceExhausted,
                              "a rank has memory for no KV block: {}", fmt::join(blocks, ", ")));
  }
  spdlog::info(
      "tensor parallel: {} KV blocks on every rank (rank 0's budget allows {}{})", kv_blocks,
      *own_blocks,
      blocks.size() > 2 || blocks[1] != *own_blocks
          ? fmt::format(", the others' {}", fmt::join(blocks.begin() + 1, blocks.end(), ", "))
          : std::string());
  LS_RETURN_IF_ERROR(coordinator->send_start(static_cast<int32_t>(kv_blocks)));
  const Status init = part->init(static_cast<int32_t>(kv_blocks));
  if (!init.is_ok()) return give_up(init.with_context(fmt::format("rank 0 (cuda:{})", device)));
  LS_RETURN_IF_ERROR(
      coordinator->gather("allocating and uploading the shards", deadline()).status());

  // Every rank holds its weights: none can fail to allocate while the others wait in
  // ncclCommInitRank.
  ncclUniqueId unique;
  const ncclResult_t made = ncclGetUniqueId(&unique);
  if (made != ncclSuccess) {
    return give_up(
        make_error(StatusCode::kInternal, "ncclGetUniqueId: {}", ncclGetErrorString(made)));
  }
  TpCommId id;
  std::memcpy(id.data(), &unique, sizeof(unique));
  LS_RETURN_IF_ERROR(coordinator->send_comm_id(id));
  const Status joined = comm->init(id, world, 0);
  if (!joined.is_ok()) return give_up(joined.with_context("rank 0"));
  LS_RETURN_IF_ERROR(coordinator->gather("creating the NCCL communicator", deadline()).status());
  spdlog::info("tensor parallel: {} ranks up", world);
  return std::unique_ptr<Executor>(std::make_unique<DistributedTpExecutor>(
      std::move(model), world, device, std::move(part), std::move(comm), std::move(coordinator),
      std::move(pass), part_options.max_batch_tokens, options.step_timeout));
}

Status run_tp_worker(std::shared_ptr<const LoadedModel> model, const CudaExecutorOptions& base,
                     const TpWorkerOptions& options) {
  if (!model) return make_error(StatusCode::kInvalidArgument, "run_tp_worker: no model");
  const int rank = options.rank, world = options.world, device = options.device;
  LS_RETURN_IF_ERROR(check_group(rank, world, device));
  if (rank == 0) {
    return make_error(StatusCode::kInvalidArgument,
                      "rank 0 is the server (llamaserve serve --tp-rank 0), not a worker");
  }
  keep_nvls_off_by_default();
  // Rank 0 checks the group (world size, rank, model) before this rank checks its shard, so
  // that a rank started with the wrong --tp hears it from rank 0.
  const TpHello hello{rank, world, model_fingerprint(*model), origin_of(device)};
  spdlog::info("tensor parallel rank {} of {} on cuda:{}: joining rank 0 at {}:{}", rank, world,
               device, options.coordinator.host, options.coordinator.port);
  LS_ASSIGN_OR_RETURN(
      std::unique_ptr<TpWorkerLink> link,
      TpWorkerLink::join(options.coordinator, hello, tp_deadline_after(options.connect_timeout)));

  // From here every failure goes to rank 0 too, which ends the group with it.
  const std::string where = fmt::format("cuda:{}", device);
  auto report = [&](const Status& status, uint32_t step = 0) {
    const Status failure = status.with_context(where);
    (void)link->send_status(step, failure);
    return failure;
  };
  if (const Status split = check_tensor_parallel(*model, world); !split.is_ok()) {
    return report(split);
  }
  auto sharded = tensor_parallel_shard(model, rank, world);
  if (!sharded.is_ok()) return report(sharded.status());
  const std::shared_ptr<const LoadedModel> shard = std::move(sharded).value();
  spdlog::info("tensor parallel rank {} of {} on cuda:{}: {}", rank, world, device,
               describe_shard(*model, *shard));
  auto comm = std::make_shared<NcclComm>(device);
  CudaExecutorOptions part_options = base;
  apply_setup(link->setup(), part_options);
  part_options.device = device;
  part_options.layers.reset();
  part_options.rank_sum = NcclComm::rank_sum(comm, rank, link->setup().half_gemm_sums);
  auto created = CudaPart::create(shard, part_options);
  if (!created.is_ok()) return report(created.status());
  std::unique_ptr<CudaPart> part = std::move(created).value();
  auto pass_thread = PassThread::create();
  if (!pass_thread.is_ok()) return report(pass_thread.status());
  std::unique_ptr<PassThread> pass = std::move(pass_thread).value();

  const auto planned = part->plan_kv_blocks();
  if (!planned.is_ok()) return report(planned.status());
  LS_RETURN_IF_ERROR(link->send_status(0, Status::ok(), *planned));
  LS_ASSIGN_OR_RETURN(const int32_t kv_blocks, link->receive_start());
  if (const Status init = part->init(kv_blocks); !init.is_ok()) return report(init);
  LS_RETURN_IF_ERROR(link->send_status(0, Status::ok()));
  LS_ASSIGN_OR_RETURN(const TpCommId id, link->receive_comm_id());
  if (const Status joined = comm->init(id, world, rank); !joined.is_ok()) return report(joined);
  LS_RETURN_IF_ERROR(link->send_status(0, Status::ok()));
  spdlog::info("tensor parallel rank {} of {} ready: {}", rank, world, part->executor().describe());

  // Passes until rank 0 is done with this rank. The part and the communicator go when this
  // returns (the part first: its graphs use the communicator).
  const int64_t n_vocab = model->config.n_vocab;
  const int32_t max_rows = part_options.max_batch_tokens;
  PieceScratch pieces;
  bool clean = false;
  Status result;
  while (true) {
    auto command = link->next();
    if (!command.is_ok()) {
      result = command.status();
      break;
    }
    if (*command == TpWorkerLink::Command::kClosed) {
      spdlog::info("tensor parallel rank {}: rank 0 closed the connection; exiting", rank);
      break;
    }
    if (*command == TpWorkerLink::Command::kShutdown) {
      clean = link->send_status(0, Status::ok()).is_ok();
      spdlog::info("tensor parallel rank {}: shut down by rank 0", rank);
      break;
    }
    const Batch& batch = link->batch();
    const uint32_t step = link->step();
    const Status valid = validate_batch(batch, part->executor().kv_info(), n_vocab,
                                        batch.logit_rows.size() * static_cast<size_t>(n_vocab));
    if (!valid.is_ok()) {
      result = report(valid.with_context(fmt::format("step {}", step)), step);
      break;
    }
    // The same pieces as rank 0's (the same max_batch_tokens, from its setup).
    pass->start([&] {
      return run_in_pieces(batch, max_rows, n_vocab, std::span<float>(), pieces,
                           [&](const Batch& piece, std::span<float>) {
                             return part->run_piece(piece, nullptr, nullptr);
                           });
    });
    if (link->wait_for_hangup(pass->done_fd())) {
      // Rank 0 gave up on the group (or vanished) while this pass may wait in a collective.
      spdlog::error(
          "tensor parallel rank {}: rank 0 hung up during step {}; aborting the NCCL "
          "communicator",
          rank, step);
      if (!abort_pass(comm, *pass)) {
        (void)pass.release();
        (void)part.release();
        return make_error(StatusCode::kUnavailable,
                          "rank 0 hung up during step {} and the pass could not be stopped", step);
      }
      auto why = link->next();
      result = !why.is_ok() ? why.status()
                            : make_error(StatusCode::kUnavailable,
                                         "rank 0 closed the connection during step {}", step);
      break;
    }
    const Status done = pass->wait();
    if (const Status sent = link->send_status(step, done.is_ok() ? done : done.with_context(where));
        !sent.is_ok()) {
      result = sent;
      break;
    }
    if (!done.is_ok()) {
      result = done.with_context(where);
      break;
    }
  }
  pass.reset();
  part.reset();
  comm->finish(clean);
  return result;
}

}  // namespace llamaserve
