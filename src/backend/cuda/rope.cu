#include <cuda_fp16.h>

#include <algorithm>

#include "backend/cuda/check.h"
#include "backend/cuda/kv_q8.cuh"
#include "backend/cuda/kv_slots.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/rope.h"

namespace llamaserve::cuda {
namespace {

constexpr int kRopeThreads = 128;

// The rotation angle of pair `pair` at `position`: a float product (as the reference computes
// it) whose cos/sin are taken in double, since positions reach 1e5 radians and more, where float
// argument reduction would cost accuracy.
__device__ __forceinline__ void rope_cos_sin(int32_t position, float inv_freq, float& c, float& s) {
  const float angle = static_cast<float>(position) * inv_freq;
  double sin_d, cos_d;
  sincos(static_cast<double>(angle), &sin_d, &cos_d);
  c = static_cast<float>(cos_d);
  s = static_cast<float>(sin_d);
}

// One place for the rotation, so that both kernels round identically.
__device__ __forceinline__ void rotate(float* x, int partner, float c, float s) {
  const float x0 = x[0], x1 = x[partner];
  x[0] = x0 * c - x1 * s;
  x[partner] = x0 * s + x1 * c;
}

// The dims of pair `pair` of a head: (2i, 2i + 1) normal, (i, i + rope_dim / 2) NeoX.
struct PairDims {
  int first, partner;
};
__device__ __forceinline__ PairDims pair_dims(const RopeArgs& a, int pair) {
  return a.ordering == RopeOrdering::kNormal ? PairDims{2 * pair, 1}
                                             : PairDims{pair, a.rope_dim / 2};
}

// One thread per (row, pair); it rotates that pair in every Q and K head, so cos/sin are
// computed once per pair.
__global__ void __launch_bounds__(kRopeThreads) rope_kernel(const RopeArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  const int n_pairs = a.rope_dim / 2;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kRopeThreads + threadIdx.x;
  if (i >= a.n_rows * n_pairs) return;
  const int64_t row = i / n_pairs;
  const int pair = static_cast<int>(i % n_pairs);
  float c, s;
  rope_cos_sin(a.positions[row], a.inv_freq[pair], c, s);
  const PairDims dims = pair_dims(a, pair);
  float* q = a.q + row * a.q_stride + dims.first;
  for (int h = 0; h < a.n_head; ++h, q += a.head_dim) rotate(q, dims.partner, c, s);
  float* k = a.k + row * a.k_stride + dims.first;
  for (int h = 0; h < a.n_head_kv; ++h, k += a.head_dim) rotate(k, dims.partner, c, s);
}

// rope_write_kv_kernel's Q8_0 work of one block: the K and V values of its (row, head) pairs
// (2 * kRopeThreads each, whole heads), and where each pair's codes go in the layer's arrays
// (-1: not a KV head, or past the last row). head_dim >= 32: at most 8 pairs.
struct KvQ8Stage {
  alignas(16) float k[2 * kRopeThreads];
  alignas(16) float v[2 * kRopeThreads];
  int64_t offset[2 * kRopeThreads / kKvQ8Block];
};

__device__ __forceinline__ KvQ8Stage& kv_q8_stage() {
  __shared__ KvQ8Stage stage;
  return stage;
}

// After a barrier over the block (every thread calls it), each group of 8 lanes quantizes one
// of the stage's 2 * kBlocks blocks (K's, then V's) and stores it.
__device__ __forceinline__ void write_kv_q8_blocks(const KvQ8Stage& stage, const KvWriteArgs& w,
                                                   int head_dim) {
  __syncthreads();
  constexpr int kBlocks = 2 * kRopeThreads / kKvQ8Block;
  static_assert(2 * kBlocks == kRopeThreads / 8, "one block per group of 8 threads");
  const int b = static_cast<int>(threadIdx.x) / 8 % kBlocks;
  const bool is_v = static_cast<int>(threadIdx.x) / 8 >= kBlocks;
  const int sub = threadIdx.x & 7;
  const int64_t head = stage.offset[b * kKvQ8Block / head_dim];  // uniform in the group
  if (head < 0) return;
  const int64_t o = head + b * kKvQ8Block % head_dim;
  const float4 x =
      reinterpret_cast<const float4*>((is_v ? stage.v : stage.k) + b * kKvQ8Block)[sub];
  store_kv_q8_block_by_8(x, sub, static_cast<int8_t*>(is_v ? w.v_cache : w.k_cache) + o,
                         static_cast<__half*>(is_v ? w.v_scales : w.k_scales) + o / kKvQ8Block);
}

// One thread per (row, head, pair of dims of the head), heads up to max(n_head, n_head_kv), so
// that every thread does one rotation and one cache store (a decode row has thousands of them;
// a thread per pair looping over the heads would wait for one load after another). Pairs below
// rope_dim / 2 rotate as rope_kernel does; the dims past rope_dim, two per thread, only travel
// to the cache.
//
// With a Q8_0 cache (kv_q8.cuh) a block's threads cover 128 / (head_dim / 2) whole (row, head)
// pairs: they leave their rotated K and their V values, and each pair's cache offset (worked out
// before the wait, as f16's), in shared memory, and after a barrier each group of 8 threads
// quantizes one block of 32 of them.
template <bool Q8>
__global__ void __launch_bounds__(kRopeThreads)
    rope_write_kv_kernel(const RopeArgs a, const KvWriteArgs w) {
  pdl_launch_dependents();
  const int half = a.head_dim / 2;
  const int n_pairs = a.rope_dim / 2;
  const int heads = max(a.n_head, a.n_head_kv);
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kRopeThreads + threadIdx.x;
  const bool live = i < a.n_rows * heads * half;
  if (!Q8 && !live) {
    pdl_wait();  // (nothing to touch; kept so that every thread waits, see launch.cuh)
    return;
  }
  const int j = static_cast<int>(i % half);
  const int h = static_cast<int>((i / half) % heads);
  const int64_t row = i / (static_cast<int64_t>(half) * heads);
  const bool rotated = j < n_pairs;
  // The positions, sequences, block tables (staged by the host before the pass) and inverse
  // frequencies are written by no kernel: the angle and the cache slot are worked out before
  // the wait for the Q/K/V projection (launch.cuh).
  float c = 1.0f, s = 0.0f;
  PairDims dims{a.rope_dim + 2 * (j - n_pairs), 1};
  if (rotated && live) {
    rope_cos_sin(a.positions[row], a.inv_freq[j], c, s);
    dims = pair_dims(a, j);
  }
  const bool kv = live && h < a.n_head_kv;
  const int64_t head_offset =
      kv ? kv_row_slot(w, row) * w.kv_dim + static_cast<int64_t>(h) * a.head_dim : -1;
  if constexpr (Q8) {
    if (j == 0) kv_q8_stage().offset[threadIdx.x / half] = head_offset;
  }
  pdl_wait();
  if (rotated && live && h < a.n_head) {
    rotate(a.q + row * a.q_stride + h * a.head_dim + dims.first, dims.partner, c, s);
  }
  if (kv) {
    float* k = a.k + row * a.k_stride + static_cast<int64_t>(h) * a.head_dim + dims.first;
    const float* v = w.v + row * w.v_stride + static_cast<int64_t>(h) * a.head_dim + dims.first;
    if (rotated) rotate(k, dims.partner, c, s);
    if constexpr (Q8) {
      KvQ8Stage& stage = kv_q8_stage();
      const int local = static_cast<int>(threadIdx.x) / half * a.head_dim + dims.first;
      stage.k[local] = k[0];
      stage.k[local + dims.partner] = k[dims.partner];
      stage.v[local] = v[0];
      stage.v[local + dims.partner] = v[dims.partner];
    } else {
      auto* k_cache = static_cast<__half*>(w.k_cache) + head_offset + dims.first;
      auto* v_cache = static_cast<__half*>(w.v_cache) + head_offset + dims.first;
      k_cache[0] = __float2half_rn(k[0]);
      k_cache[dims.partner] = __float2half_rn(k[dims.partner]);
      v_cache[0] = __float2half_rn(v[0]);
      v_cache[dims.partner] = __float2half_rn(v[dims.partner]);
    }
  }
  if constexpr (Q8) write_kv_q8_blocks(kv_q8_stage(), w, a.head_dim);
}

Status check_rope(const RopeArgs& a) {
  LS_CUDA_REQUIRE(a.q != nullptr && a.k != nullptr && a.positions != nullptr &&
                  a.inv_freq != nullptr);
  LS_CUDA_REQUIRE(a.rope_dim > 0 && a.rope_dim % 2 == 0 && a.rope_dim <= a.head_dim);
  LS_CUDA_REQUIRE(a.q_stride >= static_cast<int64_t>(a.n_head) * a.head_dim);
  LS_CUDA_REQUIRE(a.k_stride >= static_cast<int64_t>(a.n_head_kv) * a.head_dim);
  LS_CUDA_REQUIRE(a.n_rows >= 0);
  return Status::ok();
}

}  // namespace

Status rope(const RopeArgs& a, LaunchStream stream) {
  LS_RETURN_IF_ERROR(check_rope(a));
  if (a.n_rows == 0) return Status::ok();
  const int64_t threads = a.n_rows * (a.rope_dim / 2);
  const int64_t blocks = (threads + kRopeThreads - 1) / kRopeThreads;
  LS_CUDA_REQUIRE(blocks <= 0x7fffffff);
  LS_CUDA_CHECK(
      launch_kernel(rope_kernel, static_cast<unsigned>(blocks), kRopeThreads, 0, stream, a));
  return Status::ok();
}

Status rope_write_kv(const RopeArgs& a, const KvWriteArgs& w, LaunchStream stream) {
  LS_RETURN_IF_ERROR(check_rope(a));
  LS_CUDA_REQUIRE(w.k == a.k && w.k_stride == a.k_stride && w.n_rows == a.n_rows);
  LS_CUDA_REQUIRE(w.kv_dim == static_cast<int64_t>(a.n_head_kv) * a.head_dim &&
                  a.head_dim % 2 == 0);
  LS_CUDA_REQUIRE(w.v != nullptr && w.k_cache != nullptr && w.v_cache != nullptr);
  LS_CUDA_REQUIRE(w.positions == a.positions && w.seq_index != nullptr &&
                  w.block_tables != nullptr);
  LS_CUDA_REQUIRE(w.block_size > 0 && w.blocks_per_seq > 0);
  const bool q8 = w.type == KvType::kQ8_0;
  // Q8_0: a block of threads holds whole heads (2 * kRopeThreads values, a multiple of
  // head_dim), and a head whole blocks of 32 values.
  LS_CUDA_REQUIRE(!q8 || (w.k_scales != nullptr && w.v_scales != nullptr &&
                          a.head_dim % kKvQ8Block == 0 && (2 * kRopeThreads) % a.head_dim == 0));
  if (a.n_rows == 0) return Status::ok();
  const int64_t threads = a.n_rows * (a.head_dim / 2) * std::max<int64_t>(a.n_head, a.n_head_kv);
  const int64_t blocks = (threads + kRopeThreads - 1) / kRopeThreads;
  LS_CUDA_REQUIRE(blocks <= 0x7fffffff);
  LS_CUDA_CHECK(launch_kernel(q8 ? rope_write_kv_kernel<true> : rope_write_kv_kernel<false>,
                              static_cast<unsigned>(blocks), kRopeThreads, 0, stream, a, w));
  return Status::ok();
}

}  // namespace llamaserve::cuda
