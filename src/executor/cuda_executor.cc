#include "executor/cuda_executor.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "backend/cuda/attention.h"
#include "backend/cuda/attention_decode.h"
#include "backend/cuda/check.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/memory_plan.h"
#include "backend/cuda/sampling.h"
#include "executor/attention_splits.h"
#include "executor/batch_pieces.h"
#include "executor/batch_validation.h"

namespace llamaserve {
namespace {

using cuda::CudaActivations;
using cuda::CudaBackend;
using cuda::CudaKvCache;
using cuda::DeviceBatch;

constexpr uint64_t kCublasWorkspaceBytes = 32ull << 20;
constexpr int64_t kMaxGemmScratchElems = 64ll << 20;  // 128 MiB of f16 weight rows
constexpr int32_t kMaxGraphTokens = 256;
// Tensor-parallel passes split in halves for overlapping from this many rows per half.
constexpr int32_t kOverlapMinRows = 128;

int32_t next_pow2(int64_t n) {
  int32_t p = 1;
  while (p < n) p *= 2;
  return p;
}

class CudaExecutor final : public Executor, public CudaPart {
 public:
  CudaExecutor(std::shared_ptr<const LoadedModel> model, const CudaExecutorOptions& options)
      : model_(std::move(model)),
        options_(options),
        range_(options.layers.value_or(
            LayerRange{0, static_cast<int32_t>(model_->config.n_layer), true, true})) {}

  ~CudaExecutor() override {
    if (cudaSetDevice(options_.device) != cudaSuccess) return;
    if (stream_ != nullptr) LS_CUDA_LOG_ERROR(cudaStreamSynchronize(stream_));
    if (op_timer_) {
      spdlog::info("operation times:{}", op_timer_->report());
      op_timer_.reset();
    }
    for (auto& [key, exec] : graphs_) LS_CUDA_LOG_ERROR(cudaGraphExecDestroy(exec));
    for (cudaEvent_t e : {ready_[0], ready_[1], reduced_[0], reduced_[1]}) {
      if (e != nullptr) LS_CUDA_LOG_ERROR(cudaEventDestroy(e));
    }
    if (comm_stream_ != nullptr) LS_CUDA_LOG_ERROR(cudaStreamDestroy(comm_stream_));
    if (cublas_ != nullptr) cublasDestroy(cublas_);
    staging_.reset();
    pool_.reset();
    if (stream_ != nullptr) LS_CUDA_LOG_ERROR(cudaStreamDestroy(stream_));
  }

  Result<int32_t> plan_kv_blocks() override;
  Status init(int32_t kv_blocks) override;
  Executor& executor() override { return *this; }
  Status run_piece(const Batch& piece, float* logits, const StageInput* input,
                   std::span<const RowSampling> sampling = {},
                   std::span<int32_t> tokens = {}) override;
  StageInput output(int32_t rows) const override {
    return {act_.hidden, options_.device, act_.embd_stride, rows};
  }
  Status check_batch(const Batch& batch) const override {
    // Pieces carry every sequence of the batch: its count is each piece's.
    if (batch.n_seqs() > limits_.max_seqs) {
      return make_error(StatusCode::kInvalidArgument,
                        "batch of {} sequences; the CUDA executor was sized for {} per pass",
                        batch.n_seqs(), limits_.max_seqs);
    }
    return cuda::check_context_width(batch, options_.kv_block_size, limits_.max_blocks_per_seq);
  }

  const ModelConfig& config() const override { return model_->config; }
  KvCacheInfo kv_info() const override {
    return {plan_.kv_blocks, options_.kv_block_size, plan_.kv_bytes_per_block};
  }
  std::string describe() const override {
    return fmt::format(
        "cuda:{} ({}){}, {}, max {} tokens per pass, CUDA graphs {}, programmatic launch {}{}",
        options_.device, device_name_, role(), plan_.describe(options_.kv_block_size),
        options_.max_batch_tokens, options_.cuda_graphs ? "on" : "off",
        options_.tuning.pdl ? "on" : "off", op_timer_ ? ", operation timing on" : "");
  }

  Status forward(const Batch& batch, std::span<float> logits) override;
  bool samples_on_device() const override { return has_head(); }
  Status forward_sampled(const Batch& batch, std::span<const RowSampling> sampling,
                         std::span<int32_t> tokens, std::span<float> logits) override;
  bool returns_hidden() const override { return whole_model(); }
  Status forward_hidden(const Batch& batch, std::span<float> hidden) override;

 private:
  // The whole model on this device alone (not a pipeline stage or a tensor-parallel rank):
  // only then are the final hidden states all here.
  bool whole_model() const {
    return !options_.rank_sum && range_.begin == 0 &&
           range_.end == static_cast<int32_t>(model_->config.n_layer) && range_.embeddings &&
           range_.head;
  }
  // One piece of forward_hidden: eager (no graph), the final norm of the logit rows copied to
  // `hidden`.
  Status run_hidden_piece(const Batch& piece, float* hidden);
  // Whether this part computes logits: the last pipeline stage, the primary TP rank.
  bool has_head() const {
    return range_.head && (!options_.rank_sum || options_.rank_sum->primary());
  }
  std::string role() const;
  // What both split choices read of `piece`, the GPU and the limits (attention_splits.h).
  // decode_rows: the piece's sequences with one row (its decodes).
  AttentionSplitShape split_shape(const Batch& piece, int64_t decode_rows) const;
  // The rows of each of `piece`'s sequences (in rows_scratch_).
  const std::vector<int32_t>& rows_per_sequence(const Batch& piece) const;
  int32_t choose_splits(const Batch& piece, const DeviceBatch& b) const;
  // Positions per split when the piece's decodes take splits of their own, else 0.
  int32_t row_split_positions(const Batch& piece) const;
  Status run_eager(const DeviceBatch& b, int32_t n_splits);
  // Where a tensor-parallel pass runs in halves (run_overlapped): the first row of the second
  // half, else 0.
  int32_t overlap_split_row(const Batch& piece, bool graph) const;
  Status run_overlapped(const Batch& piece, const DeviceBatch& b);
  Status run_graph(const DeviceBatch& b, int32_t n_splits);

  std::shared_ptr<const LoadedModel> model_;
  CudaExecutorOptions options_;
  LayerRange range_;
  cuda::MemoryPlanRequest request_;
  std::string device_name_;
  int sm_count_ = 0;
  cuda::MemoryPlan plan_;
  cuda::CudaLimits limits_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::unique_ptr<cuda::DevicePool> pool_;
  std::unique_ptr<CudaBackend> backend_;
  CudaKvCache kv_;
  CudaActivations act_;
  std::unique_ptr<cuda::BatchStaging> staging_;
  cuda::MaskStaging masks_;                  // structured output's token masks of sampled rows
  std::unique_ptr<cuda::OpTimer> op_timer_;  // with options_.tuning.op_times
  // Tensor-parallel ranks: the stream of the overlapped all-reduces, and per half the events
  // "its block is computed" and "its all-reduce is done".
  cudaStream_t comm_stream_ = nullptr;
  cudaEvent_t ready_[2] = {nullptr, nullptr};
  cudaEvent_t reduced_[2] = {nullptr, nullptr};
  std::map<std::pair<int32_t, int32_t>, cudaGraphExec_t> graphs_;  // (padded rows, splits)
  PieceScratch pieces_;                         // for batches above max_batch_tokens
  mutable std::vector<int32_t> split_scratch_;  // overlap_split_row's per-sequence positions
  mutable std::vector<int32_t> rows_scratch_;   // rows_per_sequence's
  mutable std::vector<int32_t> decode_lengths_scratch_;  // row_split_positions's decodes
};

std::string CudaExecutor::role() const {
  const int32_t n_layer = static_cast<int32_t>(model_->config.n_layer);
  std::string role;
  if (range_.begin != 0 || range_.end != n_layer) {
    role += fmt::format(", layers {}-{}", range_.begin, range_.end - 1);
  }
  if (options_.rank_sum) role += options_.rank_sum->primary() ? ", primary TP rank" : ", TP rank";
  if (limits_.half_sums) role += ", GEMM partials summed as halves";
  return role;
}

Result<int32_t> CudaExecutor::plan_kv_blocks() {
  const ModelConfig& c = model_->config;
  LS_CUDA_CHECK(cudaSetDevice(options_.device));
  cudaDeviceProp prop;
  LS_CUDA_CHECK(cudaGetDeviceProperties(&prop, options_.device));
  device_name_ = prop.name;
  sm_count_ = prop.multiProcessorCount;
  LS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  size_t free_bytes = 0, total_bytes = 0;
  LS_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));

  if (range_.begin < 0 || range_.end > c.n_layer || range_.n_layers() < 1) {
    return make_error(StatusCode::kInvalidArgument, "layer range [{}, {}) of a {}-layer model",
                      range_.begin, range_.end, c.n_layer);
  }
  const int64_t max_context = options_.max_context_tokens > 0 ? options_.max_context_tokens
                                                              : std::max<int64_t>(c.n_ctx_train, 1);
  limits_.max_tokens = options_.max_batch_tokens;
  limits_.max_logit_rows = std::min<int64_t>(kMaxGraphTokens, options_.max_batch_tokens);
  limits_.max_seqs = options_.max_seqs;
  limits_.max_blocks_per_seq =
      static_cast<int32_t>((max_context + options_.kv_block_size - 1) / options_.kv_block_size);
  // Flash-decoding partials of up to 2048 rows x splits (attention_splits.h; 34 MB for the 7B
  // shape).
  limits_.max_split_rows = 2048;
  // f16 rows of the largest quantized matrix the GEMM path dequantizes, capped.
  int64_t max_quantized = 0;
  auto consider = [&](const QTensor& t) {
    if (t.type != TensorType::F16 && t.type != TensorType::BF16) {
      max_quantized = std::max(max_quantized, t.rows() * ((t.cols() + 7) / 8 * 8));
    }
  };
  consider(model_->weights.output);
  for (const LayerWeights& l : model_->weights.layers) {
    for (const QTensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
      consider(*t);
  }
  limits_.gemm_scratch_elems = std::min(max_quantized, kMaxGemmScratchElems);
  limits_.max_matvec_rows =
      std::min<int64_t>(limits_.max_tokens, static_cast<int64_t>(options_.gemm_min_rows) - 1);
  limits_.half_sums = options_.rank_sum && options_.rank_sum->half_sums();

  request_.range = range_;
  request_.limits = limits_;
  request_.gpu_memory_utilization = options_.gpu_memory_utilization;
  request_.kv_capacity_tokens = options_.kv_capacity_tokens;
  request_.kv_block_size = options_.kv_block_size;
  request_.kv_type = *cuda::cuda_kv_type(options_.kv_type);  // checked by CudaPart::create
  request_.workspace_bytes = kCublasWorkspaceBytes;
  request_.device_free = free_bytes;
  request_.device_total = total_bytes;
  LS_ASSIGN_OR_RETURN(plan_, cuda::plan_memory(*model_, request_));
  return plan_.kv_blocks;
}

Status CudaExecutor::init(int32_t kv_blocks) {
  const ModelConfig& c = model_->config;
  if (kv_blocks != plan_.kv_blocks) {
    cuda::MemoryPlanRequest request = request_;
    request.kv_capacity_tokens = static_cast<int64_t>(kv_blocks) * options_.kv_block_size;
    LS_ASSIGN_OR_RETURN(plan_, cuda::plan_memory(*model_, request));
  }
  spdlog::info("cuda:{} ({}) memory plan: {}", options_.device, device_name_,
               plan_.describe(options_.kv_block_size));

  LS_ASSIGN_OR_RETURN(pool_, cuda::DevicePool::create(options_.device, plan_.pool_bytes()));
  // The KV cache is allocated first and serves as the staging buffer of the weight upload
  // (it is zeroed afterwards).
  LS_ASSIGN_OR_RETURN(
      kv_, CudaKvCache::allocate(*pool_, c, request_.kv_type, range_.begin, range_.n_layers(),
                                 plan_.kv_blocks + 1, options_.kv_block_size, stream_));
  const size_t staging_bytes =
      static_cast<size_t>(std::min<uint64_t>(kv_.array_bytes(), 256ull << 20));
  LS_ASSIGN_OR_RETURN(cuda::CudaWeights weights,
                      cuda::upload_weights(*model_, range_, *pool_, kv_.k, staging_bytes, stream_,
                                           options_.on_upload_progress));
  LS_CUDA_CHECK(cudaMemsetAsync(kv_.k, 0, kv_.array_bytes(), stream_));
  LS_ASSIGN_OR_RETURN(act_, CudaActivations::allocate(*pool_, c, limits_));
  LS_ASSIGN_OR_RETURN(staging_, cuda::BatchStaging::create(*pool_, limits_));
  LS_ASSIGN_OR_RETURN(void* cublas_workspace,
                      pool_->allocate(kCublasWorkspaceBytes, "cuBLAS workspace"));

  LS_RETURN_IF_ERROR(cuda::configure_attention_kernels());
  LS_RETURN_IF_ERROR(cuda::configure_gemm_kernels());
  if (cublasCreate(&cublas_) != CUBLAS_STATUS_SUCCESS) {
    return make_error(StatusCode::kInternal, "cuda:{}: cublasCreate failed", options_.device);
  }
  LS_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
  LS_CUBLAS_CHECK(cublasSetWorkspace(cublas_, cublas_workspace, kCublasWorkspaceBytes));
  cuda::CudaBackendOptions backend_options;
  backend_options.gemm_min_rows = options_.gemm_min_rows;
  backend_options.float_gemm_min_rows = options_.float_gemm_min_rows;
  backend_options.rank_sum = options_.rank_sum;
  backend_options.tuning = options_.tuning;
  if (options_.tuning.op_times) {
    op_timer_ = std::make_unique<cuda::OpTimer>(options_.device);
    options_.cuda_graphs = false;  // events between the operations of eager passes
    backend_options.op_timer = op_timer_.get();
  }
  backend_ = std::make_unique<CudaBackend>(c, std::move(weights), cublas_, backend_options);
  if (options_.rank_sum && options_.overlap_all_reduce) {
    // The highest priority: the all-reduce's blocks get SMs as soon as the running products
    // free any, instead of queueing behind the other half's whole GEMM.
    int least = 0, greatest = 0;
    LS_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    LS_CUDA_CHECK(cudaStreamCreateWithPriority(&comm_stream_, cudaStreamNonBlocking, greatest));
    for (int p = 0; p < 2; ++p) {
      LS_CUDA_CHECK(cudaEventCreateWithFlags(&ready_[p], cudaEventDisableTiming));
      LS_CUDA_CHECK(cudaEventCreateWithFlags(&reduced_[p], cudaEventDisableTiming));
    }
  }
  LS_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return Status::ok();
}

int32_t CudaExecutor::overlap_split_row(const Batch& piece, bool graph) const {
  const int32_t n = piece.n_tokens();
  const int32_t half = n / 2;
  if (comm_stream_ == nullptr || graph || half < kOverlapMinRows || half < options_.gemm_min_rows ||
      half < options_.float_gemm_min_rows) {
    return 0;
  }
  // Each half computes its attention block by itself, the first before the second: a
  // sequence's rows in the second half must all come after its rows in the first (as prompt
  // chunks do), else the first half would read keys the second has not written yet.
  std::vector<int32_t>& last = split_scratch_;
  last.assign(static_cast<size_t>(piece.n_seqs()), -1);
  for (int32_t r = 0; r < half; ++r) {
    int32_t& p = last[static_cast<size_t>(piece.seq_index[r])];
    p = std::max(p, piece.positions[r]);
  }
  for (int32_t r = half; r < n; ++r) {
    if (piece.positions[r] <= last[static_cast<size_t>(piece.seq_index[r])]) return 0;
  }
  return half;
}

// The layers over two halves of the rows: each block (attention, FFN) of half p is followed by
// its all-reduce on comm_stream_, which runs while the other half's block computes on stream_.
// The order of the all-reduces (per layer: attention of half 0, of half 1, FFN of half 0, of
// half 1) is the same on every rank.
Status CudaExecutor::run_overlapped(const Batch& piece, const DeviceBatch& b) {
  const DeviceBatch part[2] = {cuda::split_part(b, 0), cuda::split_part(b, 1)};
  CudaActivations acts[2] = {act_, act_.rows_from(b.split_row)};
  const int32_t splits[2] = {choose_splits(piece, part[0]), choose_splits(piece, part[1])};
  if (range_.embeddings) LS_RETURN_IF_ERROR(backend_->embed(b, act_, stream_));
  auto reduce = [&](int p) -> Status {
    LS_CUDA_CHECK(cudaEventRecord(ready_[p], stream_));
    LS_CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, ready_[p], 0));
    LS_RETURN_IF_ERROR(options_.rank_sum->sum_hidden(acts[p].hidden, part[p].n_tokens,
                                                     act_.embd_stride, comm_stream_));
    LS_CUDA_CHECK(cudaEventRecord(reduced_[p], comm_stream_));
    return Status::ok();
  };
  auto reduced = [&](int p) -> Status {
    LS_CUDA_CHECK(cudaStreamWaitEvent(stream_, reduced_[p], 0));
    return Status::ok();
  };
  for (int32_t layer = range_.begin; layer < range_.end; ++layer) {
    for (int p = 0; p < 2; ++p) {
      if (layer > range_.begin) LS_RETURN_IF_ERROR(reduced(p));
      LS_RETURN_IF_ERROR(
          backend_->attention_block(part[p], layer, kv_, acts[p], splits[p], stream_));
      LS_RETURN_IF_ERROR(reduce(p));
    }
    for (int p = 0; p < 2; ++p) {
      LS_RETURN_IF_ERROR(reduced(p));
      LS_RETURN_IF_ERROR(backend_->ffn_block(part[p], layer, kv_, acts[p], stream_));
      LS_RETURN_IF_ERROR(reduce(p));
    }
  }
  LS_RETURN_IF_ERROR(reduced(0));
  return reduced(1);
}

AttentionSplitShape CudaExecutor::split_shape(const Batch& piece, int64_t decode_rows) const {
  AttentionSplitShape shape;
  shape.seq_lengths = piece.seq_lengths;
  shape.n_head_kv = static_cast<int32_t>(model_->config.n_head_kv);
  shape.sm_count = sm_count_;
  shape.max_split_rows = limits_.max_split_rows;
  shape.max_tiles = limits_.max_tokens;
  const bool f16_cache = request_.kv_type == cuda::KvType::kF16;
  const int group = static_cast<int>(model_->config.group_size());
  // The decode kernel the pass's decode rows take (attention() decides alike): the tensor-core
  // kernel puts a KV head's query heads on tensor-core rows, many warps for any group.
  const bool mma = cuda::decode_on_tensor_cores(request_.kv_type, group,
                                                static_cast<int>(options_.kv_block_size),
                                                decode_rows * model_->config.n_head_kv, sm_count_);
  shape.decode_many_warps = mma || group <= cuda::kDecodeManyWarpsGroup;
  shape.many_warps_split_tokens = mma ? cuda::kDecodeMmaSplitTokens : 0;
  shape.few_warps_split_tokens =
      !mma && group > cuda::kDecodeManyWarpsGroup ? kGroupedDecodeSplitTokens : 0;
  shape.decode_mid_warps = !mma && group <= cuda::kDecodeMidWarpsGroup;
  shape.decode_mid_blocks_per_sm = cuda::kDecodeMidWarpsBlocksPerSm;
  shape.decode_blocks_per_sm = !mma        ? cuda::kDecodeF16BlocksPerSm
                               : f16_cache ? cuda::kDecodeF16MmaBlocksPerSm
                                           : cuda::kDecodeQ8BlocksPerSm;
  return shape;
}

const std::vector<int32_t>& CudaExecutor::rows_per_sequence(const Batch& piece) const {
  std::vector<int32_t>& rows = rows_scratch_;
  rows.assign(piece.seq_lengths.size(), 0);
  for (const int32_t seq : piece.seq_index) ++rows[static_cast<size_t>(seq)];
  return rows;
}

// Flash-decoding splits of the pass (attention_splits.h).
int32_t CudaExecutor::choose_splits(const Batch& piece, const DeviceBatch& b) const {
  const std::vector<int32_t>& rows = rows_per_sequence(piece);
  AttentionSplitShape shape = split_shape(piece, std::count(rows.begin(), rows.end(), 1));
  // Decodes cut into split tiles of their own take no part in the launch-wide choice.
  for (size_t i = 0; i < rows.size() && b.max_row_splits == 0; ++i) {
    if (rows[i] == 1)
      shape.max_decode_len = std::max<int64_t>(shape.max_decode_len, piece.seq_lengths[i]);
  }
  shape.n_tiles = b.n_tiles;
  if (b.max_tile_rows > 1) shape.single_row_tiles = b.leading_single_row_tiles;
  shape.n_rows = b.n_tokens;
  shape.one_row_tiles = b.max_tile_rows == 1;
  return choose_attention_splits(shape);
}

int32_t CudaExecutor::row_split_positions(const Batch& piece) const {
  if (model_->config.group_size() > cuda::kMaxDecodeGroup) return 0;
  if (piece.n_tokens() == piece.n_seqs()) {
    return choose_row_split_positions(split_shape(piece, piece.n_seqs()));
  }
  // A mixed pass: its decode rows lead, the sequences with one row; the prompt tiles after
  // them keep their tiles (at most one a row) and launch-wide splits.
  const std::vector<int32_t>& rows = rows_per_sequence(piece);
  std::vector<int32_t>& decode_lengths = decode_lengths_scratch_;
  decode_lengths.clear();
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] == 1) decode_lengths.push_back(piece.seq_lengths[i]);
  }
  AttentionSplitShape shape = split_shape(piece, static_cast<int64_t>(decode_lengths.size()));
  shape.seq_lengths = decode_lengths;
  shape.n_rows = piece.n_tokens();  // the decode launch's partials index every row
  shape.max_tiles -= piece.n_tokens() - static_cast<int64_t>(decode_lengths.size());
  return choose_row_split_positions(shape);
}

Status CudaExecutor::run_eager(const DeviceBatch& b, int32_t n_splits) {
  return backend_->forward(b, range_, kv_, act_, n_splits, stream_);
}

Status CudaExecutor::run_graph(const DeviceBatch& b, int32_t n_splits) {
  const auto key = std::make_pair(b.n_tokens, n_splits);
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    LS_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    Status status = run_eager(b, n_splits);
    if (status.is_ok() && has_head()) status = backend_->head(b, 0, b.n_logit_rows, act_, stream_);
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
    if (!status.is_ok()) {
      if (graph != nullptr) cudaGraphDestroy(graph);
      return status;
    }
    LS_CUDA_CHECK(end);
    cudaGraphExec_t exec = nullptr;
    const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    LS_CUDA_CHECK(inst);
    it = graphs_.emplace(key, exec).first;
    spdlog::debug("cuda:{}: captured the decode graph for {} rows, {} attention splits",
                  options_.device, b.n_tokens, n_splits);
  }
  LS_CUDA_CHECK(cudaGraphLaunch(it->second, stream_));
  // The graph's kernels that wait for the other ranks are queued now: the ranks meet once
  // every one has queued its graph, before anything else (a first launch may load a kernel).
  return options_.rank_sum ? options_.rank_sum->meet() : Status::ok();
}

// One piece of at most max_batch_tokens rows; its logits go to `logits` (unless null) and
// its drawn tokens to `tokens` (when sampling is given) when this part has the head.
Status CudaExecutor::run_piece(const Batch& piece, float* logits, const StageInput* input,
                               std::span<const RowSampling> sampling, std::span<int32_t> tokens) {
  LS_CUDA_CHECK(cudaSetDevice(options_.device));
  const ModelConfig& c = model_->config;
  const int32_t n = piece.n_tokens();
  const int32_t n_logits = static_cast<int32_t>(piece.logit_rows.size());
  // Decode steps (one row per sequence, logits for every row) replay a graph; the batch is
  // padded to a power of two so that few graphs serve every batch size.
  // A decode step with one context far longer than the rest cuts each row into splits of its
  // own (attention_splits.h) and runs eagerly (a graph bakes in the tile count).
  const int32_t split_positions = row_split_positions(piece);
  const bool decode_shape =
      options_.cuda_graphs && split_positions == 0 && n == piece.n_seqs() && n_logits == n &&
      next_pow2(n) <= std::min<int64_t>(kMaxGraphTokens, limits_.max_tokens) &&
      piece.n_seqs() < limits_.max_seqs;
  const int32_t padded = decode_shape ? next_pow2(n) : n;
  const int32_t tile_rows =
      std::max<int32_t>(1, cuda::kMaxAttentionQueries / static_cast<int32_t>(c.group_size()));
  if (op_timer_) LS_RETURN_IF_ERROR(op_timer_->begin(n, stream_));
  const int32_t split_row = overlap_split_row(piece, decode_shape);
  LS_ASSIGN_OR_RETURN(
      const DeviceBatch b,
      staging_->stage(piece, padded, options_.kv_block_size, plan_.kv_blocks, tile_rows, stream_,
                      split_row, split_row == 0 ? split_positions : 0));
  if (op_timer_) LS_RETURN_IF_ERROR(op_timer_->mark("stage", stream_));
  const bool sample = has_head() && !sampling.empty();
  cuda::DeviceSampling drawn;
  const uint64_t* row_masks = nullptr;  // device; null: no row is constrained
  if (sample) {
    if (sampling.size() != piece.logit_rows.size() || tokens.size() != sampling.size()) {
      return make_error(StatusCode::kInternal, "{} sampling entries, {} tokens for {} logit rows",
                        sampling.size(), tokens.size(), piece.logit_rows.size());
    }
    LS_ASSIGN_OR_RETURN(drawn, staging_->stage_sampling(sampling, stream_));
    LS_ASSIGN_OR_RETURN(row_masks, masks_.stage(sampling, c.n_vocab, stream_));
  }
  // The graph bakes in the tile count: it holds only if every row is its own tile.
  const bool graph = decode_shape && b.n_tiles == b.n_tokens;
  // A decode step of split tiles takes their largest count; a pass with prompt tiles their
  // launch-wide splits (after split tiles of its decodes, if any: CudaBackend::forward).
  const int32_t n_splits =
      b.max_row_splits > 0 && b.max_tile_rows == 1 ? b.max_row_splits : choose_splits(piece, b);
  const size_t row_bytes = static_cast<size_t>(c.n_vocab) * sizeof(float);
  if (input != nullptr) {
    // The previous stage's rows (padding rows included: both stages pad alike).
    if (input->rows < b.n_tokens || input->stride != act_.embd_stride) {
      return make_error(StatusCode::kInternal,
                        "stage input of {} rows x {} floats, expected {} rows x {}", input->rows,
                        input->stride, b.n_tokens, act_.embd_stride);
    }
    const size_t bytes = static_cast<size_t>(b.n_tokens) * act_.embd_stride * sizeof(float);
    LS_CUDA_CHECK(cudaMemcpyPeerAsync(act_.hidden, options_.device, input->data, input->device,
                                      bytes, stream_));
    if (input->on_copied) {
      // Only the copy (and the staging before it) is queued: the wait is that short.
      LS_CUDA_CHECK(cudaStreamSynchronize(stream_));
      input->on_copied();
    }
  }
  // Rows [first, first + count) of the logits, in act_.logits from row 0: drawn and/or copied.
  auto emit = [&](int32_t first, int32_t count) -> Status {
    if (sample) {
      if (row_masks != nullptr) {
        const int64_t words = (c.n_vocab + 63) / 64;
        LS_RETURN_IF_ERROR(cuda::mask_logits(act_.logits, act_.vocab_stride, count, c.n_vocab,
                                             row_masks + first * words, words, stream_));
      }
      LS_RETURN_IF_ERROR(cuda::sample_tokens(act_.logits, act_.vocab_stride, count, c.n_vocab,
                                             drawn.params + first, drawn.tokens + first, stream_));
    }
    if (logits != nullptr) {
      LS_CUDA_CHECK(cudaMemcpy2DAsync(logits + static_cast<size_t>(first) * c.n_vocab, row_bytes,
                                      act_.logits, act_.vocab_stride * sizeof(float), row_bytes,
                                      count, cudaMemcpyDeviceToHost, stream_));
    }
    return Status::ok();
  };
  if (split_row > 0) {
    LS_RETURN_IF_ERROR(run_overlapped(piece, b));
  } else if (!graph) {
    LS_RETURN_IF_ERROR(run_eager(b, n_splits));
  }
  if (!has_head()) {
    if (graph) LS_RETURN_IF_ERROR(run_graph(b, n_splits));
  } else if (graph) {
    LS_RETURN_IF_ERROR(run_graph(b, n_splits));
    if (n_logits > 0) LS_RETURN_IF_ERROR(emit(0, n_logits));
  } else {
    for (int32_t first = 0; first < n_logits;
         first += static_cast<int32_t>(limits_.max_logit_rows)) {
      const int32_t count =
          std::min<int32_t>(static_cast<int32_t>(limits_.max_logit_rows), n_logits - first);
      LS_RETURN_IF_ERROR(backend_->head(b, first, count, act_, stream_));
      LS_RETURN_IF_ERROR(emit(first, count));
    }
  }
  if (sample && n_logits > 0) {
    LS_CUDA_CHECK(cudaMemcpyAsync(drawn.host_tokens, drawn.tokens, n_logits * sizeof(int32_t),
                                  cudaMemcpyDeviceToHost, stream_));
  }
  if (op_timer_) LS_RETURN_IF_ERROR(op_timer_->mark("sample+copy", stream_));
  LS_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (op_timer_) LS_RETURN_IF_ERROR(op_timer_->end());
  if (sample) std::copy_n(drawn.host_tokens, n_logits, tokens.begin());
  return Status::ok();
}

Status CudaExecutor::forward(const Batch& batch, std::span<float> logits) {
  const int64_t n_vocab = model_->config.n_vocab;
  // A part without the head writes no logits.
  const size_t logits_size =
      has_head() ? logits.size() : batch.logit_rows.size() * static_cast<size_t>(n_vocab);
  LS_RETURN_IF_ERROR(validate_batch(batch, kv_info(), n_vocab, logits_size));
  LS_CUDA_CHECK(cudaSetDevice(options_.device));
  return run_in_pieces(
      batch, options_.max_batch_tokens, n_vocab, has_head() ? logits : std::span<float>(), pieces_,
      [&](const Batch& piece, std::span<float> piece_logits) {
        return run_piece(piece, has_head() ? piece_logits.data() : nullptr, nullptr);
      });
}

Status CudaExecutor::forward_sampled(const Batch& batch, std::span<const RowSampling> sampling,
                                     std::span<int32_t> tokens, std::span<float> logits) {
  const int64_t n_vocab = model_->config.n_vocab;
  LS_RETURN_IF_ERROR(validate_sampled_batch(batch, kv_info(), n_vocab, sampling, tokens,
                                            has_head() ? logits.size() : 0));
  LS_CUDA_CHECK(cudaSetDevice(options_.device));
  const PassOutputs out{has_head() ? logits : std::span<float>(), sampling, tokens};
  return run_in_pieces(
      batch, options_.max_batch_tokens, n_vocab, out, pieces_,
      [&](const Batch& piece, const PassOutputs& piece_out) {
        float* piece_logits = piece_out.logits.empty() ? nullptr : piece_out.logits.data();
        return run_piece(piece, piece_logits, nullptr, piece_out.sampling, piece_out.tokens);
      });
}

Status CudaExecutor::run_hidden_piece(const Batch& piece, float* hidden) {
  const ModelConfig& c = model_->config;
  const int32_t n_rows = static_cast<int32_t>(piece.logit_rows.size());
  const int32_t tile_rows =
      std::max<int32_t>(1, cuda::kMaxAttentionQueries / static_cast<int32_t>(c.group_size()));
  if (op_timer_) LS_RETURN_IF_ERROR(op_timer_->begin(piece.n_tokens(), stream_));
  LS_ASSIGN_OR_RETURN(const DeviceBatch b,
                      staging_->stage(piece, piece.n_tokens(), options_.kv_block_size,
                                      plan_.kv_blocks, tile_rows, stream_, /*split_row=*/0));
  LS_RETURN_IF_ERROR(run_eager(b, choose_splits(piece, b)));
  const size_t row_bytes = static_cast<size_t>(c.n_embd) * sizeof(float);
  const auto max_rows = static_cast<int32_t>(limits_.max_logit_rows);
  // act_.head_rows holds max_logit_rows rows: normalized and copied out in groups of that many
  // (one stream, so each copy is done before the next norm overwrites them).
  for (int32_t first = 0; first < n_rows; first += max_rows) {
    const int32_t count = std::min(max_rows, n_rows - first);
    LS_RETURN_IF_ERROR(backend_->final_norm(b, first, count, act_, stream_));
    LS_CUDA_CHECK(cudaMemcpy2DAsync(hidden + static_cast<size_t>(first) * c.n_embd, row_bytes,
                                    act_.head_rows, act_.embd_stride * sizeof(float), row_bytes,
                                    count, cudaMemcpyDeviceToHost, stream_));
  }
  LS_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (op_timer_) LS_RETURN_IF_ERROR(op_timer_->end());
  return Status::ok();
}

Status CudaExecutor::forward_hidden(const Batch& batch, std::span<float> hidden) {
  if (!whole_model()) {
    return make_error(StatusCode::kUnsupported,
                      "{} is part of a multi-GPU layout; its hidden states are not whole",
                      describe());
  }
  const ModelConfig& c = model_->config;
  LS_RETURN_IF_ERROR(validate_hidden_batch(batch, kv_info(), c.n_vocab, c.n_embd, hidden.size()));
  LS_RETURN_IF_ERROR(check_batch(batch));
  LS_CUDA_CHECK(cudaSetDevice(options_.device));
  // Rows of n_embd floats instead of n_vocab: the pieces scatter them alike.
  return run_in_pieces(batch, options_.max_batch_tokens, c.n_embd, hidden, pieces_,
                       [&](const Batch& piece, std::span<float> piece_hidden) {
                         return run_hidden_piece(piece, piece_hidden.data());
                       });
}

}  // namespace

Result<std::unique_ptr<CudaPart>> CudaPart::create(std::shared_ptr<const LoadedModel> model,
                                                   const CudaExecutorOptions& options) {
  if (!model) return make_error(StatusCode::kInvalidArgument, "create_cuda_executor: no model");
  if (options.kv_block_size <= 0 || options.kv_block_size > 4096) {
    return make_error(StatusCode::kInvalidArgument, "kv_block_size = {} must be in [1, 4096]",
                      options.kv_block_size);
  }
  LS_RETURN_IF_ERROR(cuda::cuda_kv_type(options.kv_type).status());
  if (options.max_batch_tokens <= 0 || options.max_batch_tokens > 1 << 16) {
    return make_error(StatusCode::kInvalidArgument, "max_batch_tokens = {} must be in [1, 65536]",
                      options.max_batch_tokens);
  }
  if (options.max_seqs <= 0 || options.max_seqs > 1 << 16) {
    return make_error(StatusCode::kInvalidArgument, "max_seqs = {} must be in [1, 65536]",
                      options.max_seqs);
  }
  if (options.gemm_min_rows < 1 || options.float_gemm_min_rows < 1) {
    return make_error(StatusCode::kInvalidArgument,
                      "gemm_min_rows = {} and float_gemm_min_rows = {} must be >= 1",
                      options.gemm_min_rows, options.float_gemm_min_rows);
  }
  const ModelConfig& c = model->config;
  if (c.head_dim != 64 && c.head_dim != 128) {
    return make_error(StatusCode::kUnsupported,
                      "the CUDA attention kernel handles head_dim 64 or 128; this model has {}",
                      c.head_dim);
  }
  if (c.group_size() > cuda::kMaxAttentionQueries) {
    return make_error(StatusCode::kUnsupported,
                      "{} query heads per KV head exceed the CUDA limit of {}", c.group_size(),
                      cuda::kMaxAttentionQueries);
  }
  int devices = 0;
  LS_CUDA_CHECK(cudaGetDeviceCount(&devices));
  if (options.device < 0 || options.device >= devices) {
    return make_error(StatusCode::kInvalidArgument, "CUDA device {} does not exist ({} visible)",
                      options.device, devices);
  }
  return std::unique_ptr<CudaPart>(std::make_unique<CudaExecutor>(std::move(model), options));
}

Result<std::unique_ptr<Executor>> create_cuda_executor(std::shared_ptr<const LoadedModel> model,
                                                       const CudaExecutorOptions& options) {
  LS_ASSIGN_OR_RETURN(std::unique_ptr<CudaPart> part, CudaPart::create(std::move(model), options));
  LS_ASSIGN_OR_RETURN(const int32_t kv_blocks, part->plan_kv_blocks());
  LS_RETURN_IF_ERROR(part->init(kv_blocks));
  // The part is the executor (CudaExecutor derives from both).
  return std::unique_ptr<Executor>(static_cast<CudaExecutor*>(part.release()));
}

}  // namespace llamaserve
