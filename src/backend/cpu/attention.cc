#include "backend/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/ops.h"
#include "backend/cpu/ref_kernels.h"
#include "backend/cpu/simd.h"
#include "quant/blocks.h"

namespace llamaserve::cpu {
namespace {

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) { return load_f16x8(p); }
inline float load1(const float* p) { return *p; }
inline float load1(const uint16_t* p) { return f16_to_f32(*p); }

template <typename T>
float dot(const float* q, const T* k, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8(k + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), load8(k + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8(k + i), acc0);
  float sum = hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) sum += q[i] * load1(k + i);
  return sum;
}

// acc = acc * keep + p * v
template <typename T>
void scale_add(float* acc, float keep, float p, const T* v, int64_t n) {
  const __m256 keep8 = _mm256_set1_ps(keep), p8 = _mm256_set1_ps(p);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(
        acc + i, _mm256_fmadd_ps(p8, load8(v + i), _mm256_mul_ps(_mm256_loadu_ps(acc + i), keep8)));
  }
  for (; i < n; ++i) acc[i] = acc[i] * keep + p * load1(v + i);
}

// Scratch layout per thread: acc[group * head_dim] | scores[group * block_size] | max[group] |
// sum[group].
template <typename T>
void attend_group(const Batch& batch, const AttentionShape& shape, const float* q,
                  const CpuKvCache& cache, int32_t layer, float* out, int32_t t, int64_t kv_head,
                  float* scratch) {
  const int64_t hd = shape.head_dim;
  const int64_t group = shape.n_head / shape.n_head_kv;
  const int32_t bs = cache.geometry().block_size;
  float* acc = scratch;
  float* scores = acc + group * hd;
  float* row_max = scores + group * bs;
  float* row_sum = row_max + group;
  std::fill(acc, acc + group * hd, 0.0f);
  std::fill(row_max, row_max + group, -std::numeric_limits<float>::infinity());
  std::fill(row_sum, row_sum + group, 0.0f);

  const int64_t q_stride = shape.n_head * hd;
  const float* q_group = q + t * q_stride + kv_head * group * hd;
  const int32_t* table = batch.block_table(batch.seq_index[t]);
  const int32_t n_keys = batch.positions[t] + 1;
  for (int32_t first = 0, blk = 0; first < n_keys; first += bs, ++blk) {
    const int32_t n_valid = std::min(bs, n_keys - first);
    const int32_t physical = table[blk];
    for (int32_t j = 0; j < n_valid; ++j) {
      const T* k = static_cast<const T*>(cache.k(layer, physical, j)) + kv_head * hd;
      for (int64_t h = 0; h < group; ++h)
        scores[h * bs + j] = dot(q_group + h * hd, k, hd) * shape.scale;
    }
    for (int64_t h = 0; h < group; ++h) {
      float* s = scores + h * bs;
      float block_max = s[0];
      for (int32_t j = 1; j < n_valid; ++j) block_max = std::max(block_max, s[j]);
      const float new_max = std::max(row_max[h], block_max);
      const float keep = std::exp(row_max[h] - new_max);  // 0 on the first block
      float block_sum = 0.0f;
      int32_t j = 0;
      for (; j + 8 <= n_valid; j += 8) {
        const __m256 p = exp256(_mm256_sub_ps(_mm256_loadu_ps(s + j), _mm256_set1_ps(new_max)));
        _mm256_storeu_ps(s + j, p);
        block_sum += hsum(p);
      }
      for (; j < n_valid; ++j) {
        s[j] = std::exp(s[j] - new_max);
        block_sum += s[j];
      }
      row_sum[h] = row_sum[h] * keep + block_sum;
      row_max[h] = new_max;
      // The rescale of acc by `keep` is folded into the first V row of the block.
      const T* v0 = static_cast<const T*>(cache.v(layer, physical, 0)) + kv_head * hd;
      scale_add(acc + h * hd, keep, s[0], v0, hd);
    }
    for (int32_t j = 1; j < n_valid; ++j) {
      const T* v = static_cast<const T*>(cache.v(layer, physical, j)) + kv_head * hd;
      for (int64_t h = 0; h < group; ++h) scale_add(acc + h * hd, 1.0f, scores[h * bs + j], v, hd);
    }
  }
  float* out_group = out + t * q_stride + kv_head * group * hd;
  for (int64_t h = 0; h < group; ++h) {
    const float inv = 1.0f / row_sum[h];
    for (int64_t i = 0; i < hd; ++i) out_group[h * hd + i] = acc[h * hd + i] * inv;
  }
}

float load_value(TensorType type, const void* base, int64_t i) {
  return type == TensorType::F32 ? static_cast<const float*>(base)[i]
                                 : half_to_float(Half{static_cast<const uint16_t*>(base)[i]});
}

}  // namespace

AttentionScratch::AttentionScratch(const AttentionShape& shape, int32_t block_size, int n_threads) {
  const int64_t group = shape.n_head / std::max<int64_t>(1, shape.n_head_kv);
  per_thread_ = static_cast<size_t>(group * shape.head_dim + group * block_size + 2 * group);
  buffer_.resize(per_thread_ * static_cast<size_t>(std::max(1, n_threads)));
}

void attention(const Batch& batch, const AttentionShape& shape, const float* q,
               const CpuKvCache& cache, int32_t layer, float* out, ThreadPool& pool,
               AttentionScratch& scratch) {
  const size_t n_items =
      static_cast<size_t>(batch.n_tokens()) * static_cast<size_t>(shape.n_head_kv);
  const bool f16 = cache.geometry().type == TensorType::F16;
  pool.run([&](int thread_index, int n_threads) {
    float* buffer = scratch.thread_buffer(thread_index);
    // Items interleaved over threads: neighbouring rows of a prefill have similar lengths.
    for (size_t item = static_cast<size_t>(thread_index); item < n_items;
         item += static_cast<size_t>(n_threads)) {
      const int32_t t = static_cast<int32_t>(item / static_cast<size_t>(shape.n_head_kv));
      const int64_t kv_head = static_cast<int64_t>(item % static_cast<size_t>(shape.n_head_kv));
      if (f16) {
        attend_group<uint16_t>(batch, shape, q, cache, layer, out, t, kv_head, buffer);
      } else {
        attend_group<float>(batch, shape, q, cache, layer, out, t, kv_head, buffer);
      }
    }
  });
}

void attention_ref(const Batch& batch, const AttentionShape& shape, const float* q,
                   const CpuKvCache& cache, int32_t layer, float* out) {
  const int64_t hd = shape.head_dim;
  const int64_t group = shape.n_head / shape.n_head_kv;
  const int32_t bs = cache.geometry().block_size;
  const TensorType type = cache.geometry().type;
  std::vector<float> scores;
  for (int32_t t = 0; t < batch.n_tokens(); ++t) {
    const int32_t* table = batch.block_table(batch.seq_index[t]);
    const int32_t n_keys = batch.positions[t] + 1;
    scores.assign(static_cast<size_t>(n_keys), 0.0f);
    for (int64_t h = 0; h < shape.n_head; ++h) {
      const int64_t kv_head = h / group;
      const float* qh = q + (t * shape.n_head + h) * hd;
      for (int32_t j = 0; j < n_keys; ++j) {
        const void* k = cache.k(layer, table[j / bs], j % bs);
        float s = 0.0f;
        for (int64_t i = 0; i < hd; ++i) s += qh[i] * load_value(type, k, kv_head * hd + i);
        scores[j] = s * shape.scale;
      }
      ref::softmax(scores.data(), n_keys);
      float* oh = out + (t * shape.n_head + h) * hd;
      for (int64_t i = 0; i < hd; ++i) oh[i] = 0.0f;
      for (int32_t j = 0; j < n_keys; ++j) {
        const void* v = cache.v(layer, table[j / bs], j % bs);
        const float p = scores[j];
        for (int64_t i = 0; i < hd; ++i) oh[i] += p * load_value(type, v, kv_head * hd + i);
      }
    }
  }
}

}  // namespace llamaserve::cpu
