#include "backend/cuda/peer_all_reduce.h"

#include "backend/cuda/check.h"
#include "backend/cuda/peer_access.h"

namespace llamaserve::cuda {
namespace {

constexpr int kThreads = 1024;
// A rank that waits this long for its peers traps (the launch fails with an error) instead of
// hanging the device: a peer that never arrives is a bug, not a slow step.
constexpr long long kSpinLimitCycles = 20'000'000'000LL;  // about 10 s at H200 clocks

struct PeerTables {
  float* inbox[PeerAllReduce::kMaxRanks];
  uint32_t* flags[PeerAllReduce::kMaxRanks];
};

// Launched without programmatic dependent launch: plain stream order, so everything before it
// in the stream (the partial in `data`) is complete when it starts.
__global__ void __launch_bounds__(kThreads)
    peer_all_reduce_kernel(float* data, int64_t count, int rank, int n_ranks, int64_t capacity,
                           PeerTables t, uint32_t* epoch_counter) {
  __shared__ uint32_t epoch;
  if (threadIdx.x == 0) epoch = *epoch_counter + 1;
  __syncthreads();
  const uint32_t e = epoch;
  const int slot = static_cast<int>(e & 1);
  const int64_t n4 = count / 4;
  const float4* mine = reinterpret_cast<const float4*>(data);

  // 1. The partial into slot [slot][rank] of every peer's inbox.
  for (int p = 0; p < n_ranks; ++p) {
    if (p == rank) continue;
    float4* dst = reinterpret_cast<float4*>(t.inbox[p] + (slot * n_ranks + rank) * capacity);
    for (int64_t i = threadIdx.x; i < n4; i += kThreads) dst[i] = mine[i];
  }
  // 2. The stores are visible to the peers before the flags that announce them.
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x < n_ranks && static_cast<int>(threadIdx.x) != rank) {
    volatile uint32_t* flag = t.flags[threadIdx.x] + slot * n_ranks + rank;
    *flag = e;
  }
  // 3. Every peer's partial of this epoch is in our inbox.
  if (threadIdx.x < n_ranks && static_cast<int>(threadIdx.x) != rank) {
    volatile uint32_t* flag = t.flags[rank] + slot * n_ranks + threadIdx.x;
    const long long start = clock64();
    while (*flag < e) {
      if (clock64() - start > kSpinLimitCycles) __trap();
    }
  }
  __syncthreads();
  __threadfence_system();
  // 4. The sum in rank order (identical on every rank), read past the L1 (__ldcv): the
  //    inbox was written by other devices.
  const float* inbox = t.inbox[rank] + slot * n_ranks * capacity;
  float4* out = reinterpret_cast<float4*>(data);
  for (int64_t i = threadIdx.x; i < n4; i += kThreads) {
    float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int k = 0; k < n_ranks; ++k) {
      const float4 v =
          k == rank ? out[i] : __ldcv(reinterpret_cast<const float4*>(inbox + k * capacity) + i);
      sum.x += v.x;
      sum.y += v.y;
      sum.z += v.z;
      sum.w += v.w;
    }
    out[i] = sum;
  }
  if (threadIdx.x == 0) *epoch_counter = e;
}

}  // namespace

Result<std::unique_ptr<PeerAllReduce>> PeerAllReduce::create(const std::vector<int>& devices,
                                                             size_t capacity) {
  const int n = static_cast<int>(devices.size());
  if (n < 2 || n > kMaxRanks || capacity == 0 || capacity % 4 != 0) {
    return make_error(StatusCode::kInvalidArgument,
                      "peer all-reduce: {} ranks (2 to {}) of capacity {} (a multiple of 4)", n,
                      kMaxRanks, capacity);
  }
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      LS_ASSIGN_OR_RETURN(const bool can, can_access_peer(devices[static_cast<size_t>(a)],
                                                          devices[static_cast<size_t>(b)]));
      if (!can) {
        return make_error(StatusCode::kUnsupported, "cuda:{} cannot access cuda:{} peer-to-peer",
                          devices[static_cast<size_t>(a)], devices[static_cast<size_t>(b)]);
      }
    }
  }
  std::unique_ptr<PeerAllReduce> group(new PeerAllReduce());
  group->devices_ = devices;
  group->capacity_ = capacity;
  for (int r = 0; r < n; ++r) {
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      LS_RETURN_IF_ERROR(
          enable_peer_access(devices[static_cast<size_t>(r)], devices[static_cast<size_t>(p)]));
    }
    LS_CUDA_CHECK(cudaSetDevice(devices[static_cast<size_t>(r)]));
    float* inbox = nullptr;
    uint32_t* flags = nullptr;
    uint32_t* epoch = nullptr;
    LS_CUDA_CHECK(cudaMalloc(&inbox, 2 * static_cast<size_t>(n) * capacity * sizeof(float)));
    group->inbox_.push_back(inbox);
    LS_CUDA_CHECK(cudaMalloc(&flags, 2 * static_cast<size_t>(n) * sizeof(uint32_t)));
    group->flags_.push_back(flags);
    LS_CUDA_CHECK(cudaMalloc(&epoch, sizeof(uint32_t)));
    group->epoch_.push_back(epoch);
    LS_CUDA_CHECK(cudaMemset(flags, 0, 2 * static_cast<size_t>(n) * sizeof(uint32_t)));
    LS_CUDA_CHECK(cudaMemset(epoch, 0, sizeof(uint32_t)));
    LS_CUDA_CHECK(cudaDeviceSynchronize());
  }
  return Result<std::unique_ptr<PeerAllReduce>>(std::move(group));
}

PeerAllReduce::~PeerAllReduce() {
  for (size_t r = 0; r < devices_.size(); ++r) {
    if (cudaSetDevice(devices_[r]) != cudaSuccess) continue;
    if (r < inbox_.size()) LS_CUDA_LOG_ERROR(cudaFree(inbox_[r]));
    if (r < flags_.size()) LS_CUDA_LOG_ERROR(cudaFree(flags_[r]));
    if (r < epoch_.size()) LS_CUDA_LOG_ERROR(cudaFree(epoch_[r]));
  }
}

Status PeerAllReduce::run(int rank, float* data, size_t count, cudaStream_t stream) const {
  const int n = static_cast<int>(devices_.size());
  LS_CUDA_REQUIRE(rank >= 0 && rank < n);
  LS_CUDA_REQUIRE(count <= capacity_ && count % 4 == 0);
  LS_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(data) % 16 == 0);
  if (count == 0) return Status::ok();
  PeerTables tables = {};
  for (int r = 0; r < n; ++r) {
    tables.inbox[r] = inbox_[static_cast<size_t>(r)];
    tables.flags[r] = flags_[static_cast<size_t>(r)];
  }
  peer_all_reduce_kernel<<<1, kThreads, 0, stream>>>(data, static_cast<int64_t>(count), rank, n,
                                                     static_cast<int64_t>(capacity_), tables,
                                                     epoch_[static_cast<size_t>(rank)]);
  LS_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

}  // namespace llamaserve::cuda
