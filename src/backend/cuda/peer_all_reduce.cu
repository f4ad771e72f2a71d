#include "backend/cuda/check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/peer_access.h"
#include "backend/cuda/peer_all_reduce.h"
#include "backend/cuda/peer_reduce.cuh"

namespace llamaserve::cuda {
namespace {

constexpr int kThreads = 1024;

// Producer and consumer in one block. Launched without programmatic dependent launch: plain
// stream order, so everything before it in the stream (the partial in `data`) is complete
// when it starts.
__global__ void __launch_bounds__(kThreads)
    peer_all_reduce_kernel(float* data, int64_t count, const PeerReduceView v) {
  const uint32_t epoch = peer_reduce_epoch(v);
  for (int64_t i = threadIdx.x; i < count; i += kThreads) peer_reduce_store(v, epoch, i, data[i]);
  for (int64_t i = threadIdx.x; i < count; i += kThreads) data[i] = peer_reduce_sum(v, epoch, i);
  peer_reduce_done(v);
}

// One block per row.
__global__ void __launch_bounds__(kThreads)
    peer_reduce_add_kernel(const PeerReduceView v, float* x, int64_t x_stride, int64_t n) {
  pdl_launch_dependents();
  pdl_wait();
  const uint32_t epoch = peer_reduce_epoch(v);
  const int64_t row = blockIdx.x;
  float* xr = x + row * x_stride;
  for (int64_t c = threadIdx.x; c < n; c += kThreads) {
    xr[c] += peer_reduce_sum(v, epoch, row * n + c);
  }
  peer_reduce_done(v);
}

// One thread: this rank's partial of the next pulled sum is complete (the kernels before it in
// the stream wrote it), so raise the epoch and tell every peer, releasing at system scope.
// Launched without programmatic dependent launch: plain stream order.
__global__ void peer_pull_signal_kernel(const PeerReduceView v) {
  const unsigned long long epoch = *v.pull_epoch + 1;
  *v.pull_epoch = epoch;
  __threadfence_system();
  for (int d = 0; d < v.n_ranks; ++d) {
    if (d == v.rank) continue;
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(v.pull_signals[d] + v.rank), "l"(epoch)
                 : "memory");
  }
}

// One block per row.
__global__ void __launch_bounds__(kThreads)
    peer_pull_add_kernel(const PeerReduceView v, int slot, int64_t stride, float* x,
                         int64_t x_stride, int64_t n) {
  pdl_launch_dependents();
  pdl_wait();
  peer_pull_wait(v);
  const int64_t row = blockIdx.x;
  float* xr = x + row * x_stride;
  for (int64_t c = threadIdx.x; c < n; c += kThreads)
    xr[c] += peer_pull_sum(v, slot, row * stride + c);
}

}  // namespace

Result<std::unique_ptr<PeerAllReduce>> PeerAllReduce::create(const std::vector<int>& devices,
                                                             size_t capacity,
                                                             size_t pull_slot_bytes,
                                                             SumType pull_type) {
  const int n = static_cast<int>(devices.size());
  if (n < 2 || n > kMaxRanks || capacity == 0) {
    return make_error(StatusCode::kInvalidArgument,
                      "peer all-reduce: {} ranks (2 to {}) of capacity {}", n, kMaxRanks, capacity);
  }
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      const int from = devices[static_cast<size_t>(a)], to = devices[static_cast<size_t>(b)];
      // Ranks sharing a device could starve each other of SMs while one waits for the other.
      if (from == to) {
        return make_error(StatusCode::kUnsupported, "cuda:{} holds two ranks", from);
      }
      LS_ASSIGN_OR_RETURN(const bool can, can_access_peer(from, to));
      if (!can) {
        return make_error(StatusCode::kUnsupported, "cuda:{} cannot access cuda:{} peer-to-peer",
                          from, to);
      }
    }
  }
  std::unique_ptr<PeerAllReduce> group(new PeerAllReduce());
  group->devices_ = devices;
  group->capacity_ = capacity;
  group->pull_slot_bytes_ = pull_slot_bytes;
  group->pull_type_ = pull_type;
  LS_CUDA_CHECK(
      cudaHostAlloc(&group->abort_host_, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable));
  *group->abort_host_ = 0;
  LS_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&group->abort_device_),
                                         group->abort_host_, 0));
  for (int r = 0; r < n; ++r) {
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      LS_RETURN_IF_ERROR(
          enable_peer_access(devices[static_cast<size_t>(r)], devices[static_cast<size_t>(p)]));
    }
    LS_CUDA_CHECK(cudaSetDevice(devices[static_cast<size_t>(r)]));
    unsigned long long* inbox = nullptr;
    const size_t inbox_bytes = 2 * static_cast<size_t>(n) * capacity * sizeof(*inbox);
    LS_CUDA_CHECK(cudaMalloc(&inbox, inbox_bytes));
    group->inbox_.push_back(inbox);
    LS_CUDA_CHECK(cudaMemset(inbox, 0, inbox_bytes));  // epoch 0: no reduction's words
    unsigned long long* epoch = nullptr;
    LS_CUDA_CHECK(cudaMalloc(&epoch, sizeof(unsigned long long)));
    group->epoch_.push_back(epoch);
    unsigned int* arrivals = nullptr;
    LS_CUDA_CHECK(cudaMalloc(&arrivals, sizeof(unsigned int)));
    group->arrivals_.push_back(arrivals);
    LS_CUDA_CHECK(cudaMemset(epoch, 0, sizeof(unsigned long long)));
    LS_CUDA_CHECK(cudaMemset(arrivals, 0, sizeof(unsigned int)));
    if (pull_slot_bytes > 0) {
      void* pull = nullptr;
      LS_CUDA_CHECK(cudaMalloc(&pull, 2 * pull_slot_bytes));
      group->pull_.push_back(pull);
      unsigned long long* signals = nullptr;
      LS_CUDA_CHECK(cudaMalloc(&signals, static_cast<size_t>(n) * sizeof(*signals)));
      group->pull_signals_.push_back(signals);
      LS_CUDA_CHECK(cudaMemset(signals, 0, static_cast<size_t>(n) * sizeof(*signals)));
      unsigned long long* pull_epoch = nullptr;
      LS_CUDA_CHECK(cudaMalloc(&pull_epoch, sizeof(*pull_epoch)));
      group->pull_epoch_.push_back(pull_epoch);
      LS_CUDA_CHECK(cudaMemset(pull_epoch, 0, sizeof(*pull_epoch)));
    }
    LS_CUDA_CHECK(cudaDeviceSynchronize());
  }
  return Result<std::unique_ptr<PeerAllReduce>>(std::move(group));
}

PeerAllReduce::~PeerAllReduce() {
  for (size_t r = 0; r < devices_.size(); ++r) {
    if (cudaSetDevice(devices_[r]) != cudaSuccess) continue;
    if (r < inbox_.size()) LS_CUDA_LOG_ERROR(cudaFree(inbox_[r]));
    if (r < epoch_.size()) LS_CUDA_LOG_ERROR(cudaFree(epoch_[r]));
    if (r < arrivals_.size()) LS_CUDA_LOG_ERROR(cudaFree(arrivals_[r]));
    if (r < pull_.size()) LS_CUDA_LOG_ERROR(cudaFree(pull_[r]));
    if (r < pull_signals_.size()) LS_CUDA_LOG_ERROR(cudaFree(pull_signals_[r]));
    if (r < pull_epoch_.size()) LS_CUDA_LOG_ERROR(cudaFree(pull_epoch_[r]));
  }
  if (abort_host_ != nullptr) LS_CUDA_LOG_ERROR(cudaFreeHost(abort_host_));
}

PeerReduceView PeerAllReduce::view(int rank) const {
  PeerReduceView v;
  const int n = n_ranks();
  v.rank = rank;
  v.n_ranks = n;
  v.capacity = static_cast<int64_t>(capacity_);
  for (int r = 0; r < n; ++r) v.inbox[r] = inbox_[static_cast<size_t>(r)];
  v.epoch = epoch_[static_cast<size_t>(rank)];
  v.arrivals = arrivals_[static_cast<size_t>(rank)];
  v.abort = abort_device_;
  if (pull_slot_bytes_ > 0) {
    v.pull_slot_bytes = static_cast<int64_t>(pull_slot_bytes_);
    v.pull_type = pull_type_;
    for (int r = 0; r < n; ++r) {
      v.pull[r] = pull_[static_cast<size_t>(r)];
      v.pull_signals[r] = pull_signals_[static_cast<size_t>(r)];
    }
    v.pull_epoch = pull_epoch_[static_cast<size_t>(rank)];
  }
  return v;
}

void PeerAllReduce::abort() { reinterpret_cast<volatile int*>(abort_host_)[0] = 1; }

Status PeerAllReduce::run(int rank, float* data, size_t count, cudaStream_t stream) const {
  LS_CUDA_REQUIRE(rank >= 0 && rank < n_ranks());
  LS_CUDA_REQUIRE(count <= capacity_ && data != nullptr);
  if (count == 0) return Status::ok();
  peer_all_reduce_kernel<<<1, kThreads, 0, stream>>>(data, static_cast<int64_t>(count), view(rank));
  LS_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status peer_pull_signal(const PeerReduceView& view, cudaStream_t stream) {
  LS_CUDA_REQUIRE(view.pulls());
  peer_pull_signal_kernel<<<1, 1, 0, stream>>>(view);
  LS_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status peer_pull_add(const PeerReduceView& view, int slot, int64_t stride, float* x,
                     int64_t x_stride, int64_t n_rows, int64_t n, LaunchStream stream) {
  LS_CUDA_REQUIRE(view.pulls() && (slot == 0 || slot == 1) && x != nullptr && n > 0);
  LS_CUDA_REQUIRE(n_rows >= 0 && stride >= n && (n_rows <= 1 || x_stride >= n));
  LS_CUDA_REQUIRE(view.pull_fits(n_rows, stride));
  if (n_rows == 0) return Status::ok();
  LS_CUDA_CHECK(launch_kernel(peer_pull_add_kernel, static_cast<unsigned>(n_rows), kThreads, 0,
                              stream, view, slot, stride, x, x_stride, n));
  return Status::ok();
}

Status peer_reduce_add(const PeerReduceView& view, float* x, int64_t x_stride, int64_t n_rows,
                       int64_t n, LaunchStream stream) {
  LS_CUDA_REQUIRE(view.active() && x != nullptr && n > 0 && n_rows >= 0);
  LS_CUDA_REQUIRE(n_rows * n <= view.capacity && (n_rows <= 1 || x_stride >= n));
  if (n_rows == 0) return Status::ok();
  LS_CUDA_CHECK(launch_kernel(peer_reduce_add_kernel, static_cast<unsigned>(n_rows), kThreads, 0,
                              stream, view, x, x_stride, n));
  return Status::ok();
}

}  // namespace llamaserve::cuda
