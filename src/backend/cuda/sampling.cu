#include <algorithm>
#include <cfloat>

#include "backend/cuda/check.h"
#include "backend/cuda/sampling.h"

namespace llamaserve::cuda {
namespace {

constexpr int kSampleThreads = 1024;
constexpr int kWarps = kSampleThreads / 32;

__host__ __device__ inline uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
  const uint64_t product = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(product >> 32);
  return static_cast<uint32_t>(product);
}

// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"), first word.
__host__ __device__ inline uint32_t philox_first_word(uint64_t seed, uint64_t offset) {
  uint32_t c[4] = {static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32), 0u, 0u};
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, hi1;
    const uint32_t lo0 = mulhilo(0xD2511F53u, c[0], &hi0);
    const uint32_t lo1 = mulhilo(0xCD9E8D57u, c[2], &hi1);
    const uint32_t next[4] = {hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0};
    for (int i = 0; i < 4; ++i) c[i] = next[i];
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c[0];
}

__host__ __device__ inline float uniform_from_word(uint32_t w) {
  return static_cast<float>(w >> 8) * (1.0f / 16777216.0f);  // 24 bits: exact in [0, 1)
}

struct Shared {
  float f[kWarps];
  int i[kWarps];
  float scan[kWarps];
  int broadcast_i;
};

__device__ float block_sum(float v, Shared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if (lane == 0) sh.f[warp] = v;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) total += sh.f[w];
  return total;
}

__device__ int block_count(int v, Shared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if (lane == 0) sh.i[warp] = v;
  __syncthreads();
  int total = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) total += sh.i[w];
  return total;
}

// Max value and its lowest index.
__device__ void block_argmax(float& value, int& index, Shared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, value, o);
    const int i = __shfl_xor_sync(0xffffffffu, index, o);
    if (v > value || (v == value && i < index)) {
      value = v;
      index = i;
    }
  }
  __syncthreads();
  if (lane == 0) {
    sh.f[warp] = value;
    sh.i[warp] = index;
  }
  __syncthreads();
  value = sh.f[0];
  index = sh.i[0];
  for (int w = 1; w < kWarps; ++w) {
    if (sh.f[w] > value || (sh.f[w] == value && sh.i[w] < index)) {
      value = sh.f[w];
      index = sh.i[w];
    }
  }
}

// Probabilities are positive floats (or 0), whose bit patterns order like their values, so a
// threshold is found by bisection on the bits: the largest t with keep(t) true.
template <class Keep>
__device__ unsigned int largest_threshold(Keep keep) {
  unsigned int lo = 0, hi = 0x3f800001u;  // keep(lo) holds; keep(hi) does not (above 1.0f)
  while (hi - lo > 1) {
    const unsigned int mid = lo + (hi - lo) / 2;
    if (keep(mid)) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// One block per row. p_i = e^((l_i - max) / T) in (0, 1] are recomputed on every pass
// instead of stored: the row is read from L2, and no scratch memory is needed.
__global__ void __launch_bounds__(kSampleThreads)
    sample_kernel(const float* logits, int64_t stride, int64_t n_vocab,
                  const SamplingParams* params, int32_t* tokens) {
  __shared__ Shared sh;
  const int64_t row = blockIdx.x;
  const float* l = logits + row * stride;
  const SamplingParams p = params[row];
  const int n = static_cast<int>(n_vocab);

  float best = -INFINITY;
  int best_index = 0;
  for (int i = threadIdx.x; i < n; i += kSampleThreads) {
    const float v = l[i];
    if (v > best) {  // strided ascending indices: the first max per thread is the lowest
      best = v;
      best_index = i;
    }
  }
  block_argmax(best, best_index, sh);
  if (p.temperature <= 0.0f || !(best > -INFINITY)) {
    if (threadIdx.x == 0) tokens[row] = best_index;
    return;
  }
  const float inv_t = 1.0f / p.temperature;
  auto prob = [&](int i) { return __expf((l[i] - best) * inv_t); };

  // Top-k: the k-th largest probability (bits), by counting.
  unsigned int threshold = 0;
  if (p.top_k > 0 && p.top_k < n) {
    threshold = largest_threshold([&](unsigned int t) {
      int count = 0;
      for (int i = threadIdx.x; i < n; i += kSampleThreads) count += __float_as_uint(prob(i)) >= t;
      return block_count(count, sh) >= p.top_k;
    });
  }
  // Top-p within the top-k set: the largest threshold whose kept mass reaches top_p of it.
  if (p.top_p < 1.0f) {
    const unsigned int k_threshold = threshold;
    float mass_k = 0.0f;
    for (int i = threadIdx.x; i < n; i += kSampleThreads) {
      const float q = prob(i);
      if (__float_as_uint(q) >= k_threshold) mass_k += q;
    }
    const float target = fmaxf(p.top_p, 0.0f) * block_sum(mass_k, sh);
    threshold = largest_threshold([&](unsigned int t) {
      const unsigned int th = max(t, k_threshold);
      float mass = 0.0f;
      for (int i = threadIdx.x; i < n; i += kSampleThreads) {
        const float q = prob(i);
        if (__float_as_uint(q) >= th) mass += q;
      }
      return block_sum(mass, sh) >= target;
    });
  }

  // Draw: thread t owns a contiguous index range; a block scan of the ranges' kept mass finds
  // the range holding u, whose thread walks it.
  const int per_thread = (n + kSampleThreads - 1) / kSampleThreads;
  const int first = threadIdx.x * per_thread;
  const int last = min(n, first + per_thread);
  float local = 0.0f;
  for (int i = first; i < last; ++i) {
    const float q = prob(i);
    if (__float_as_uint(q) >= threshold) local += q;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float inclusive = local;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float v = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += v;
  }
  if (lane == 31) sh.scan[warp] = inclusive;
  __syncthreads();
  float warp_offset = 0.0f, total = 0.0f;
  for (int w = 0; w < kWarps; ++w) {
    if (w < warp) warp_offset += sh.scan[w];
    total += sh.scan[w];
  }
  inclusive += warp_offset;
  float exclusive = __shfl_up_sync(0xffffffffu, inclusive, 1);
  if (lane == 0) exclusive = warp_offset;
  // Rounding can leave u == total, or give two trailing ranges the same end; the lowest
  // owning index wins, so the draw stays deterministic.
  if (threadIdx.x == 0) sh.broadcast_i = 0x7fffffff;
  __syncthreads();
  const float u = uniform_from_word(philox_first_word(p.seed, p.offset)) * total;
  if (local > 0.0f && u >= exclusive &&
      (u < inclusive || threadIdx.x == kSampleThreads - 1 || inclusive >= total)) {
    float c = exclusive;
    int chosen = -1;
    for (int i = first; i < last; ++i) {
      const float q = prob(i);
      if (__float_as_uint(q) < threshold) continue;
      chosen = i;
      c += q;
      if (u < c) break;
    }
    if (chosen >= 0) atomicMin(&sh.broadcast_i, chosen);
  }
  __syncthreads();
  if (threadIdx.x == 0) tokens[row] = sh.broadcast_i != 0x7fffffff ? sh.broadcast_i : best_index;
}

// One block per row.
__global__ void mask_kernel(float* logits, int64_t stride, int64_t n_vocab, const uint64_t* masks,
                            int64_t words_per_row) {
  float* l = logits + blockIdx.x * stride;
  const uint64_t* mask = masks + blockIdx.x * words_per_row;
  for (int64_t i = threadIdx.x; i < n_vocab; i += blockDim.x) {
    if (((mask[i >> 6] >> (i & 63)) & 1) == 0) l[i] = -INFINITY;
  }
}

}  // namespace

Status mask_logits(float* logits, int64_t logits_stride, int64_t n_rows, int64_t n_vocab,
                   const uint64_t* masks, int64_t words_per_row, cudaStream_t stream) {
  LS_CUDA_REQUIRE(logits != nullptr && masks != nullptr);
  LS_CUDA_REQUIRE(n_vocab > 0 && logits_stride >= n_vocab && words_per_row * 64 >= n_vocab);
  LS_CUDA_REQUIRE(n_rows >= 0 && n_rows <= 0x7fffffff);
  if (n_rows == 0) return Status::ok();
  mask_kernel<<<static_cast<unsigned>(n_rows), 256, 0, stream>>>(logits, logits_stride, n_vocab,
                                                                 masks, words_per_row);
  LS_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

MaskStaging::~MaskStaging() {
  if (host_ != nullptr) cudaFreeHost(host_);
  if (device_ != nullptr) cudaFree(device_);
}

Result<const uint64_t*> MaskStaging::stage(std::span<const RowSampling> rows, int64_t n_vocab,
                                           cudaStream_t stream) {
  const bool any = std::any_of(rows.begin(), rows.end(),
                               [](const RowSampling& row) { return row.allowed != nullptr; });
  if (!any) return static_cast<const uint64_t*>(nullptr);
  const auto words = static_cast<size_t>((n_vocab + 63) / 64);
  const size_t needed = words * rows.size();
  if (needed > capacity_words_) {
    if (host_ != nullptr) LS_CUDA_CHECK(cudaFreeHost(host_));
    if (device_ != nullptr) LS_CUDA_CHECK(cudaFree(device_));
    host_ = nullptr;
    device_ = nullptr;
    capacity_words_ = 0;
    LS_CUDA_CHECK(cudaMallocHost(&host_, needed * sizeof(uint64_t)));
    LS_CUDA_CHECK(cudaMalloc(&device_, needed * sizeof(uint64_t)));
    capacity_words_ = needed;
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    uint64_t* out = host_ + r * words;
    const RowSampling& row = rows[r];
    if (row.allowed == nullptr) {
      std::fill(out, out + words, ~uint64_t{0});
      continue;
    }
    const size_t given = std::min(words, static_cast<size_t>(std::max(row.allowed_words, 0)));
    std::copy(row.allowed, row.allowed + given, out);
    std::fill(out + given, out + words, uint64_t{0});
  }
  LS_CUDA_CHECK(
      cudaMemcpyAsync(device_, host_, needed * sizeof(uint64_t), cudaMemcpyHostToDevice, stream));
  return static_cast<const uint64_t*>(device_);
}

float philox_uniform(uint64_t seed, uint64_t offset) {
  return uniform_from_word(philox_first_word(seed, offset));
}

Status sample_tokens(const float* logits, int64_t logits_stride, int64_t n_rows, int64_t n_vocab,
                     const SamplingParams* params, int32_t* tokens, cudaStream_t stream) {
  LS_CUDA_REQUIRE(logits != nullptr && params != nullptr && tokens != nullptr);
  LS_CUDA_REQUIRE(n_vocab > 0 && n_vocab <= 0x7fffffff && logits_stride >= n_vocab);
  LS_CUDA_REQUIRE(n_rows >= 0 && n_rows <= 0x7fffffff);
  if (n_rows == 0) return Status::ok();
  sample_kernel<<<static_cast<unsigned>(n_rows), kSampleThreads, 0, stream>>>(
      logits, logits_stride, n_vocab, params, tokens);
  LS_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

}  // namespace llamaserve::cuda
