#include "backend/cuda/check.h"
#include "backend/cuda/rope.h"

namespace llamaserve::cuda {
namespace {

constexpr int kRopeThreads = 128;

// One thread per (row, pair); it rotates that pair in every Q and K head, so cos/sin are
// computed once per pair. The angle is a float product (as the reference computes it) and
// its cos/sin are taken in double: positions reach 1e5 radians and more, where float
// argument reduction would cost accuracy.
__global__ void __launch_bounds__(kRopeThreads) rope_kernel(const RopeArgs a) {
  const int n_pairs = a.rope_dim / 2;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kRopeThreads + threadIdx.x;
  if (i >= a.n_rows * n_pairs) return;
  const int64_t row = i / n_pairs;
  const int pair = static_cast<int>(i % n_pairs);
  const float angle = static_cast<float>(a.positions[row]) * a.inv_freq[pair];
  double sin_d, cos_d;
  sincos(static_cast<double>(angle), &sin_d, &cos_d);
  const float c = static_cast<float>(cos_d), s = static_cast<float>(sin_d);
  const int first = a.ordering == RopeOrdering::kNormal ? 2 * pair : pair;
  const int partner = a.ordering == RopeOrdering::kNormal ? 1 : n_pairs;
  float* q = a.q + row * a.q_stride + first;
  for (int h = 0; h < a.n_head; ++h, q += a.head_dim) {
    const float x0 = q[0], x1 = q[partner];
    q[0] = x0 * c - x1 * s;
    q[partner] = x0 * s + x1 * c;
  }
  float* k = a.k + row * a.k_stride + first;
  for (int h = 0; h < a.n_head_kv; ++h, k += a.head_dim) {
    const float x0 = k[0], x1 = k[partner];
    k[0] = x0 * c - x1 * s;
    k[partner] = x0 * s + x1 * c;
  }
}

}  // namespace

Status rope(const RopeArgs& a, cudaStream_t stream) {
  LS_CUDA_REQUIRE(a.q != nullptr && a.k != nullptr && a.positions != nullptr &&
                  a.inv_freq != nullptr);
  LS_CUDA_REQUIRE(a.rope_dim > 0 && a.rope_dim % 2 == 0 && a.rope_dim <= a.head_dim);
  LS_CUDA_REQUIRE(a.q_stride >= static_cast<int64_t>(a.n_head) * a.head_dim);
  LS_CUDA_REQUIRE(a.k_stride >= static_cast<int64_t>(a.n_head_kv) * a.head_dim);
  LS_CUDA_REQUIRE(a.n_rows >= 0);
  if (a.n_rows == 0) return Status::ok();
  const int64_t threads = a.n_rows * (a.rope_dim / 2);
  const int64_t blocks = (threads + kRopeThreads - 1) / kRopeThreads;
  LS_CUDA_REQUIRE(blocks <= 0x7fffffff);
  rope_kernel<<<static_cast<unsigned>(blocks), kRopeThreads, 0, stream>>>(a);
  LS_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

}  // namespace llamaserve::cuda
