#include <algorithm>

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/check.h"
#include "backend/cuda/device_matrix.h"
#include "backend/cuda/launch.cuh"

namespace llamaserve::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kBlocksPerCta = kThreads / 32;  // one warp per 32-element block

// Grid: x over groups of kBlocksPerCta blocks of a row, y over rows (folded past 65535).
__global__ void __launch_bounds__(kThreads)
    quantize_q8_kernel(const float* __restrict__ x, int64_t x_stride, int64_t n_rows,
                       int64_t n_blocks, Q8Rows out) {
  pdl_launch_dependents();
  pdl_wait();
  const int lane = threadIdx.x & 31;
  const int64_t block = static_cast<int64_t>(blockIdx.x) * kBlocksPerCta + (threadIdx.x >> 5);
  if (block >= n_blocks) return;  // whole warps
  for (int64_t r = blockIdx.y; r < n_rows; r += gridDim.y) {
    quantize_q8_warp(x[r * x_stride + block * kQ8Block + lane], lane,
                     out.qs + r * out.qs_stride + block * kQ8Block,
                     out.ds + r * out.ds_stride + block);
  }
}

int64_t qs_stride(int64_t n_cols) { return (n_cols + 15) / 16 * 16; }

}  // namespace

uint64_t q8_rows_bytes(int64_t n_rows, int64_t n_cols) {
  const uint64_t rows = static_cast<uint64_t>(n_rows);
  return align_up(rows * static_cast<uint64_t>(qs_stride(n_cols)), kDeviceAlignment) +
         align_up(rows * static_cast<uint64_t>((n_cols + kQ8Block - 1) / kQ8Block) * 16,
                  kDeviceAlignment);
}

Q8Rows q8_rows_view(void* storage, int64_t n_rows, int64_t n_cols) {
  Q8Rows v;
  v.qs = static_cast<int8_t*>(storage);
  v.qs_stride = qs_stride(n_cols);
  v.ds = reinterpret_cast<float4*>(
      static_cast<uint8_t*>(storage) +
      align_up(static_cast<uint64_t>(n_rows) * v.qs_stride, kDeviceAlignment));
  v.ds_stride = (n_cols + kQ8Block - 1) / kQ8Block;
  return v;
}

Status quantize_q8(const float* x, int64_t x_stride, int64_t n_rows, int64_t n, const Q8Rows& out,
                   LaunchStream stream) {
  LS_CUDA_REQUIRE(x != nullptr && out.qs != nullptr && out.ds != nullptr);
  LS_CUDA_REQUIRE(n > 0 && n % kQ8Block == 0 && x_stride >= n && n_rows >= 0);
  LS_CUDA_REQUIRE(out.qs_stride >= n && out.qs_stride % 16 == 0 && out.ds_stride >= n / kQ8Block);
  if (n_rows == 0) return Status::ok();
  const int64_t n_blocks = n / kQ8Block;
  const int64_t grid_x = (n_blocks + kBlocksPerCta - 1) / kBlocksPerCta;
  LS_CUDA_REQUIRE(grid_x <= 0x7fffffff);
  const dim3 grid(static_cast<unsigned>(grid_x),
                  static_cast<unsigned>(std::min<int64_t>(n_rows, 65535)));
  LS_CUDA_CHECK(launch_kernel(quantize_q8_kernel, grid, kThreads, 0, stream, x, x_stride, n_rows,
                              n_blocks, out));
  return Status::ok();
}

void quantize_q8_reference(const float* x, int64_t n, int8_t* qs, float4* ds) {
  for (int64_t b = 0; b < n / kQ8Block; ++b) {
    const float* v = x + b * kQ8Block;
    float amax = 0.0f;
    for (int i = 0; i < kQ8Block; ++i) amax = std::max(amax, std::fabs(v[i]));
    const float d = q8_scale(amax);
    const float inv = q8_inverse(d);
    int sums[2] = {0, 0};
    for (int i = 0; i < kQ8Block; ++i) {
      const int code = q8_code(v[i], inv);
      qs[b * kQ8Block + pair_order_byte(i)] = static_cast<int8_t>(code);
      sums[i / 16] += code;
    }
    ds[b] = q8_block_sums(d, sums[0], sums[1]);
  }
}

}  // namespace llamaserve::cuda
