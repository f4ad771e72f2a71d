#include <cuda_fp16.h>

#include <algorithm>

#include "backend/cuda/check.h"
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

// One thread per (row, head, pair of dims of the head), heads up to max(n_head, n_head_kv), so
// that every thread does one rotation and one cache store (a decode row has thousands of them;
// a thread per pair looping over the heads would wait for one load after another). Pairs below
// rope_dim / 2 rotate as rope_kernel does; the dims past rope_dim, two per thread, only travel
// to the cache.
__global__ void __launch_bounds__(kRopeThreads)
    rope_write_kv_kernel(const RopeArgs a, const KvWriteArgs w) {
  pdl_launch_dependents();
  const int half = a.head_dim / 2;
  const int n_pairs = a.rope_dim / 2;
  const int heads = max(a.n_head, a.n_head_kv);
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kRopeThreads + threadIdx.x;
  if (i >= a.n_rows * heads * half) {
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
  if (rotated) {
    rope_cos_sin(a.positions[row], a.inv_freq[j], c, s);
    dims = pair_dims(a, j);
  }
  int64_t o = 0;
  if (h < a.n_head_kv) {
    const int pos = w.positions[row];
    const int64_t block = w.block_tables[static_cast<int64_t>(w.seq_index[row]) * w.blocks_per_seq +
                                         pos / w.block_size];
    o = (block * w.block_size + pos % w.block_size) * w.kv_dim +
        static_cast<int64_t>(h) * a.head_dim + dims.first;
  }
  pdl_wait();
  if (rotated && h < a.n_head) {
    rotate(a.q + row * a.q_stride + h * a.head_dim + dims.first, dims.partner, c, s);
  }
  if (h >= a.n_head_kv) return;
  float* k = a.k + row * a.k_stride + static_cast<int64_t>(h) * a.head_dim + dims.first;
  const float* v = w.v + row * w.v_stride + static_cast<int64_t>(h) * a.head_dim + dims.first;
  if (rotated) rotate(k, dims.partner, c, s);
  auto* k_cache = static_cast<__half*>(w.k_cache) + o;
  auto* v_cache = static_cast<__half*>(w.v_cache) + o;
  k_cache[0] = __float2half_rn(k[0]);
  k_cache[dims.partner] = __float2half_rn(k[dims.partner]);
  v_cache[0] = __float2half_rn(v[0]);
  v_cache[dims.partner] = __float2half_rn(v[dims.partner]);
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
  if (a.n_rows == 0) return Status::ok();
  const int64_t threads = a.n_rows * (a.head_dim / 2) * std::max<int64_t>(a.n_head, a.n_head_kv);
  const int64_t blocks = (threads + kRopeThreads - 1) / kRopeThreads;
  LS_CUDA_REQUIRE(blocks <= 0x7fffffff);
  LS_CUDA_CHECK(launch_kernel(rope_write_kv_kernel, static_cast<unsigned>(blocks), kRopeThreads, 0,
                              stream, a, w));
  return Status::ok();
}

}  // namespace llamaserve::cuda
