#include "backend/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "backend/cpu/attention_avx512.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/ref_kernels.h"
#include "backend/cpu/simd.h"
#include "quant/blocks.h"

namespace llamaserve::cpu {
namespace {

// Rows of one KV head's block as the cache stores them (kv_cache.h): row j of n values, and
// values [c, c + 8) or i of a row read as floats. A Q8_0 row is n / 32 blocks; c is a multiple
// of 8, so eight values never straddle two blocks.
inline const float* row_at(const float* rows, int32_t j, int64_t n) { return rows + j * n; }
inline const uint16_t* row_at(const uint16_t* rows, int32_t j, int64_t n) { return rows + j * n; }
inline const BlockQ8_0* row_at(const BlockQ8_0* rows, int32_t j, int64_t n) {
  return rows + j * (n / kQK8_0);
}
inline __m256 load8(const float* row, int64_t c) { return _mm256_loadu_ps(row + c); }
inline __m256 load8(const uint16_t* row, int64_t c) { return load_f16x8(row + c); }
inline __m256 load8(const BlockQ8_0* row, int64_t c) {
  const BlockQ8_0& block = row[c / kQK8_0];
  const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(block.qs + c % kQK8_0));
  return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)),
                       _mm256_set1_ps(f16_to_f32(block.d.bits)));
}
inline float load1(const float* row, int64_t i) { return row[i]; }
inline float load1(const uint16_t* row, int64_t i) { return f16_to_f32(row[i]); }
inline float load1(const BlockQ8_0* row, int64_t i) {
  const BlockQ8_0& block = row[i / kQK8_0];
  return f16_to_f32(block.d.bits) * static_cast<float>(block.qs[i % kQK8_0]);
}

// Σ q[i] k[i] over the n values of row k.
template <typename T>
float dot(const float* q, const T* k, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8(k, i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), load8(k, i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8(k, i), acc0);
  float sum = hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) sum += q[i] * load1(k, i);
  return sum;
}

// s[j] = scale * q · key j for the keys j in [first, n_keys) of one head's block of an F16 or F32
// cache, whose keys are dimension-major (kv_cache.h: value d of key j at kt[d * bs + j]), eight
// keys a register. Each key's sum is four partial sums over the dimensions d = i mod 4, each in
// dimension order, added as (p0 + p1) + (p2 + p3); keys past the last register that the block
// still holds whole go through one more register (the slots past n_keys give scores that
// nothing reads), the rest of a block whose size is no multiple of eight one key at a time, and
// attention_avx512.h's heads-together scoring does the same in 16-lane registers, so a key's
// score has the same bits on every path.
inline __m256 load8_keys(const float* kt, int64_t d, int32_t bs, int32_t j) {
  return _mm256_loadu_ps(kt + d * bs + j);
}
inline __m256 load8_keys(const uint16_t* kt, int64_t d, int32_t bs, int32_t j) {
  return load_f16x8(kt + d * bs + j);
}
template <typename T>
void block_scores_dim_major(const float* q, const T* kt, int32_t bs, int32_t first, int32_t n_keys,
                            int64_t n, float scale, float* s) {
  int32_t j = first;
  for (; j < n_keys && j + 8 <= bs; j += 8) {
    __m256 p0 = _mm256_setzero_ps(), p1 = p0, p2 = p0, p3 = p0;
    const auto step = [&](__m256& p, int64_t d) {
      p = _mm256_fmadd_ps(_mm256_set1_ps(q[d]), load8_keys(kt, d, bs, j), p);
    };
    int64_t d = 0;
    for (; d + 4 <= n; d += 4) {
      step(p0, d);
      step(p1, d + 1);
      step(p2, d + 2);
      step(p3, d + 3);
    }
    if (d < n) step(p0, d);
    if (d + 1 < n) step(p1, d + 1);
    if (d + 2 < n) step(p2, d + 2);
    const __m256 sum = _mm256_add_ps(_mm256_add_ps(p0, p1), _mm256_add_ps(p2, p3));
    _mm256_storeu_ps(s + j, _mm256_mul_ps(sum, _mm256_set1_ps(scale)));
  }
  for (; j < n_keys; ++j) {
    float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t d = 0; d < n; ++d) p[d & 3] = std::fma(q[d], load1(kt, d * bs + j), p[d & 3]);
    s[j] = ((p[0] + p[1]) + (p[2] + p[3])) * scale;
  }
}

// Eight signed bytes as floats.
inline __m256 q8x8(const int8_t* qs) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs))));
}

// s[j] = scale * q · keys[j] for the keys j in [first, n_keys) of a head's block of Q8_0 key rows
// (n % 32 == 0): eight keys at a time, each 32-value block's sums taken unscaled and then
// multiplied by the eight keys' scales at once; the keys past the last eight one at a time.
void block_scores(const float* q, const BlockQ8_0* keys, int32_t first, int32_t n_keys, int64_t n,
                  float scale, float* s) {
  const int64_t n_blocks = n / kQK8_0;
  int32_t j = first;
  for (; j + 8 <= n_keys; j += 8) {
    const BlockQ8_0* k[8];
    for (int r = 0; r < 8; ++r) k[r] = row_at(keys, j + r, n);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n_blocks; ++b) {
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
             a7 = a0;
      for (int c = 0; c < kQK8_0; c += 8) {
        const __m256 qc = _mm256_loadu_ps(q + b * kQK8_0 + c);
        a0 = _mm256_fmadd_ps(qc, q8x8(k[0][b].qs + c), a0);
        a1 = _mm256_fmadd_ps(qc, q8x8(k[1][b].qs + c), a1);
        a2 = _mm256_fmadd_ps(qc, q8x8(k[2][b].qs + c), a2);
        a3 = _mm256_fmadd_ps(qc, q8x8(k[3][b].qs + c), a3);
        a4 = _mm256_fmadd_ps(qc, q8x8(k[4][b].qs + c), a4);
        a5 = _mm256_fmadd_ps(qc, q8x8(k[5][b].qs + c), a5);
        a6 = _mm256_fmadd_ps(qc, q8x8(k[6][b].qs + c), a6);
        a7 = _mm256_fmadd_ps(qc, q8x8(k[7][b].qs + c), a7);
      }
      acc = _mm256_fmadd_ps(hsum8(a0, a1, a2, a3, a4, a5, a6, a7), q8_scales(k, b), acc);
    }
    _mm256_storeu_ps(s + j, _mm256_mul_ps(acc, _mm256_set1_ps(scale)));
  }
  for (; j < n_keys; ++j) s[j] = dot(q, row_at(keys, j, n), n) * scale;
}

// The largest of s[0 .. n), n >= 1 (a maximum is exact in any order).
inline float block_max(const float* s, int32_t n) {
  int32_t j = 0;
  float max = s[0];
  if (n >= 8) {
    __m256 m = _mm256_loadu_ps(s);
    for (j = 8; j + 8 <= n; j += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(s + j));
    max = hmax(m);
  }
  for (; j < n; ++j) max = std::max(max, s[j]);
  return max;
}

// Keys of one work unit, in blocks: rows longer than this are split so that a long decode
// row keeps every thread busy.
constexpr int32_t kChunkBlocks = 16;

// How many blocks ahead of its use a block's K/V are requested.
constexpr int32_t kPrefetchBlocks = 2;

// Asks for the n_bytes at p ahead of their use (the next block of a paged sequence lies
// anywhere in the cache, out of reach of the hardware prefetcher). Into L2: a block's K and V
// are 64 lines or more at once, more than L1's fill buffers hold, and requests to L1 stalled
// the thread on them (bench/results/2026-12-05-cpu-epyc-attention-l2-prefetch.md).
inline void prefetch(const void* p, size_t n_bytes) {
  const char* c = static_cast<const char*>(p);
  for (size_t i = 0; i < n_bytes; i += 64) _mm_prefetch(c + i, _MM_HINT_T1);
}

// acc[0..8 kChunks) = acc * keep + Σ_j p[j] * v[j][first, first + 8 kChunks), over the n-value
// rows v[j]: kChunks independent accumulators held in registers across the rows.
template <int kChunks, typename T>
void accumulate_slice(float* acc, float keep, const float* p, const T* v, int64_t first,
                      int32_t n_rows, int64_t n) {
  __m256 a[kChunks];
  for (int c = 0; c < kChunks; ++c)
    a[c] = _mm256_mul_ps(_mm256_loadu_ps(acc + 8 * c), _mm256_set1_ps(keep));
  for (int32_t j = 0; j < n_rows; ++j) {
    const __m256 pj = _mm256_set1_ps(p[j]);
    const T* row = row_at(v, j, n);
    for (int c = 0; c < kChunks; ++c) a[c] = _mm256_fmadd_ps(pj, load8(row, first + 8 * c), a[c]);
  }
  for (int c = 0; c < kChunks; ++c) _mm256_storeu_ps(acc + 8 * c, a[c]);
}

// acc = acc * keep + Σ_j p[j] * v[j] over n_rows value rows of n values.
template <typename T>
void accumulate_values(float* acc, float keep, const float* p, const T* v, int32_t n_rows,
                       int64_t n) {
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) accumulate_slice<8>(acc + i, keep, p, v, i, n_rows, n);
  for (; i + 8 <= n; i += 8) accumulate_slice<1>(acc + i, keep, p, v, i, n_rows, n);
  for (; i < n; ++i) {
    float a = acc[i] * keep;
    for (int32_t j = 0; j < n_rows; ++j) a += p[j] * load1(row_at(v, j, n), i);
    acc[i] = a;
  }
}

// accumulate_values on Q8_0 values (n % 32 == 0): kBlocks blocks of 32 from block `first`,
// each row's weight p[j] multiplied by the block's scale once.
template <int kBlocks>
void accumulate_q8_slice(float* acc, float keep, const float* p, const BlockQ8_0* v, int64_t first,
                         int32_t n_rows, int64_t n) {
  constexpr int kChunks = kBlocks * kQK8_0 / 8;
  __m256 a[kChunks];
  for (int c = 0; c < kChunks; ++c)
    a[c] = _mm256_mul_ps(_mm256_loadu_ps(acc + 8 * c), _mm256_set1_ps(keep));
  for (int32_t j = 0; j < n_rows; ++j) {
    const BlockQ8_0* row = row_at(v, j, n) + first;
    for (int b = 0; b < kBlocks; ++b) {
      const __m256 pd = _mm256_set1_ps(p[j] * f16_to_f32(row[b].d.bits));
      for (int c = 0; c < kQK8_0 / 8; ++c) {
        a[b * 4 + c] = _mm256_fmadd_ps(pd, q8x8(row[b].qs + 8 * c), a[b * 4 + c]);
      }
    }
  }
  for (int c = 0; c < kChunks; ++c) _mm256_storeu_ps(acc + 8 * c, a[c]);
}

void accumulate_values(float* acc, float keep, const float* p, const BlockQ8_0* v, int32_t n_rows,
                       int64_t n) {
  const int64_t n_blocks = n / kQK8_0;
  int64_t b = 0;
  for (; b + 2 <= n_blocks; b += 2) {
    accumulate_q8_slice<2>(acc + b * kQK8_0, keep, p, v, b, n_rows, n);
  }
  if (b < n_blocks) accumulate_q8_slice<1>(acc + b * kQK8_0, keep, p, v, b, n_rows, n);
}

// n floats rounded up to whole cache lines: the pieces below that different threads write lie
// in lines of their own.
size_t whole_lines(int64_t n) {
  constexpr int64_t kLineFloats = kCacheLineBytes / sizeof(float);
  return static_cast<size_t>((n + kLineFloats - 1) / kLineFloats * kLineFloats);
}

// Floats of per-thread scratch (see attend_range).
size_t scratch_floats(int64_t group, int32_t block_size) {
  return whole_lines(group * block_size + group);
}

// Floats of one partial result: acc[group][hd] | max[group] | sum[group].
size_t state_floats(int64_t group, int64_t head_dim) {
  return whole_lines(group * head_dim + 2 * group);
}

// One unit: a token row, one KV head, cache blocks [block_begin, block_end) of its sequence
// and query heads [head_begin, head_end) of the `group` sharing the KV head, with an online
// softmax over the blocks; K and V are read as the cache holds them (f16 converted in
// registers, Q8_0 scaled in registers). Writes those heads' unnormalised state: acc (Σ p v), max
// and sum (Σ p). A head's arithmetic is the same whichever unit runs it. With heads_together
// (an f16 or Q8_0 cache, AVX-512) the unit's heads score each key and take each
// value row together (attention_avx512.h): the same bits, each row converted once. Scratch:
// scores[group][bs] | keep[group].
template <typename T>
void attend_range(const Batch& batch, const AttentionShape& shape, const float* q,
                  const CpuKvCache& cache, int32_t layer, const AttentionScratch::Unit& unit,
                  bool heads_together, float* state, float* scratch) {
  const int64_t hd = shape.head_dim;
  const int64_t group = shape.n_head / shape.n_head_kv;
  const int32_t bs = cache.geometry().block_size;
  const int32_t t = unit.row;
  const int64_t kv_head = unit.kv_head;
  const int32_t block_end = unit.block_end;
  float* acc = state;
  float* row_max = acc + group * hd;
  float* row_sum = row_max + group;
  float* scores = scratch;
  float* keep = scratch + group * bs;
  const int32_t n_heads = unit.head_end - unit.head_begin;
  std::fill(acc + unit.head_begin * hd, acc + unit.head_end * hd, 0.0f);
  std::fill(row_max + unit.head_begin, row_max + unit.head_end,
            -std::numeric_limits<float>::infinity());
  std::fill(row_sum + unit.head_begin, row_sum + unit.head_end, 0.0f);

  const float* q_group = q + t * shape.n_head * hd + kv_head * group * hd;
  const int32_t* table = batch.block_table(batch.seq_index[t]);
  const int32_t n_keys = batch.positions[t] + 1;
  for (int32_t blk = unit.block_begin; blk < block_end; ++blk) {
    const int32_t n_valid = std::min(bs, n_keys - blk * bs);
    const int32_t physical = table[blk];
    if (blk + kPrefetchBlocks < block_end) {
      const size_t head_bytes = static_cast<size_t>(bs) * cache.geometry().row_bytes();
      prefetch(cache.k(layer, table[blk + kPrefetchBlocks], kv_head), head_bytes);
      prefetch(cache.v(layer, table[blk + kPrefetchBlocks], kv_head), head_bytes);
    }
    const T* keys = static_cast<const T*>(cache.k(layer, physical, kv_head));
    const T* values = static_cast<const T*>(cache.v(layer, physical, kv_head));
    // Every head's scores of the block's valid keys, into scores[h][0, n_valid).
    int32_t done = 0;  // keys scored for all the unit's heads together
    if constexpr (!std::is_same_v<T, float>) {
      if (heads_together) {
        float* s = scores + unit.head_begin * bs;
        if constexpr (std::is_same_v<T, BlockQ8_0>) {
          done = block_scores_heads_avx512(q_group + unit.head_begin * hd, n_heads, keys, n_valid,
                                           hd, shape.scale, s, bs);
        } else {
          done = block_scores_heads_avx512(q_group + unit.head_begin * hd, n_heads, keys, bs,
                                           n_valid, hd, shape.scale, s, bs);
        }
      }
    }
    for (int64_t h = unit.head_begin; h < unit.head_end; ++h) {
      const float* qh = q_group + h * hd;
      if constexpr (std::is_same_v<T, BlockQ8_0>) {
        block_scores(qh, keys, done, n_valid, hd, shape.scale, scores + h * bs);
      } else {
        block_scores_dim_major(qh, keys, bs, done, n_valid, hd, shape.scale, scores + h * bs);
      }
    }
    for (int64_t h = unit.head_begin; h < unit.head_end; ++h) {
      float* s = scores + h * bs;
      const float new_max = std::max(row_max[h], block_max(s, n_valid));
      // 0 on the first block; exactly 1 (what exp(0) gives) while the maximum stands.
      keep[h] = new_max == row_max[h] ? 1.0f : std::exp(row_max[h] - new_max);
      __m256 sums = _mm256_setzero_ps();
      int32_t j = 0;
      for (; j + 8 <= n_valid; j += 8) {
        const __m256 p = exp256(_mm256_sub_ps(_mm256_loadu_ps(s + j), _mm256_set1_ps(new_max)));
        _mm256_storeu_ps(s + j, p);
        sums = _mm256_add_ps(sums, p);
      }
      float block_sum = hsum(sums);
      for (; j < n_valid; ++j) {
        s[j] = std::exp(s[j] - new_max);
        block_sum += s[j];
      }
      row_sum[h] = row_sum[h] * keep[h] + block_sum;
      row_max[h] = new_max;
      if (!heads_together) accumulate_values(acc + h * hd, keep[h], s, values, n_valid, hd);
    }
    if constexpr (!std::is_same_v<T, float>) {
      if (heads_together) {
        accumulate_values_heads_avx512(acc + unit.head_begin * hd, keep + unit.head_begin,
                                       scores + unit.head_begin * bs, bs, n_heads, values, n_valid,
                                       hd);
      }
    }
  }
}

// out (heads [head_begin, head_end) of the group) = the softmax-weighted values of one or more
// partial states over consecutive key ranges, merged in order.
void finish(const float* states, int32_t n_states, int64_t group, int64_t hd, int32_t head_begin,
            int32_t head_end, float* out) {
  const size_t stride = state_floats(group, hd);
  for (int64_t h = head_begin; h < head_end; ++h) {
    float max = -std::numeric_limits<float>::infinity();
    for (int32_t c = 0; c < n_states; ++c) max = std::max(max, states[c * stride + group * hd + h]);
    float sum = 0.0f;
    float* o = out + h * hd;
    std::fill(o, o + hd, 0.0f);
    for (int32_t c = 0; c < n_states; ++c) {
      const float* state = states + c * stride;
      const float weight = std::exp(state[group * hd + h] - max);
      sum += state[group * hd + group + h] * weight;
      for (int64_t i = 0; i < hd; ++i) o[i] += state[h * hd + i] * weight;
    }
    const float inv = 1.0f / sum;
    for (int64_t i = 0; i < hd; ++i) o[i] *= inv;
  }
}

// Query heads per unit when the (row, KV head, chunk) units are split by heads: the size with
// the shortest slowest thread, counting a unit's per-block work outside the heads (block
// tables, prefetches, the softmax bookkeeping) as one more head. Units are dealt round-robin,
// so a thread runs ceil(units / threads) of them. Ties keep the larger size (fewer units).
int32_t heads_per_unit(int64_t n_units, int64_t group, int n_threads) {
  int32_t best = static_cast<int32_t>(group);
  int64_t best_cost = std::numeric_limits<int64_t>::max();
  for (int64_t h = group; h >= 1; --h) {
    const int64_t pieces = (group + h - 1) / h;
    const int64_t cost = (n_units * pieces + n_threads - 1) / n_threads * (h + 1);
    if (cost < best_cost) {
      best = static_cast<int32_t>(h);
      best_cost = cost;
    }
  }
  return best;
}

}  // namespace

AttentionScratch::AttentionScratch(const AttentionShape& shape, int32_t block_size, int n_threads) {
  const int64_t group = shape.n_head / std::max<int64_t>(1, shape.n_head_kv);
  per_part_ = scratch_floats(group, block_size) + state_floats(group, shape.head_dim);
  buffer_.resize(per_part_ * static_cast<size_t>(std::max(1, n_threads)));
}

void attention(const Batch& batch, const AttentionShape& shape, const float* q,
               const CpuKvCache& cache, int32_t layer, float* out, ThreadPool& pool,
               AttentionScratch& scratch, KernelIsa isa) {
  const int64_t hd = shape.head_dim;
  const int64_t group = shape.n_head / shape.n_head_kv;
  const int32_t bs = cache.geometry().block_size;
  const size_t state_size = state_floats(group, hd);
  // Work units: (row, KV head, chunk of kChunkBlocks blocks). A row's chunks depend on its own
  // length only, so its result is the same whatever else the batch holds; rows of several
  // chunks get one partial state per chunk, merged after the parallel region. Too few units
  // for the threads (a decode step's few rows) are split by query heads as well, which
  // changes no head's arithmetic.
  auto row_blocks = [&](int32_t t) { return (batch.positions[t] + bs) / bs; };
  auto row_chunks = [](int32_t n_blocks) { return (n_blocks + kChunkBlocks - 1) / kChunkBlocks; };
  int64_t n_units = 0;
  for (int32_t t = 0; t < batch.n_tokens(); ++t)
    n_units += shape.n_head_kv * row_chunks(row_blocks(t));
  const int32_t heads = heads_per_unit(n_units, group, pool.size());
  auto& units = scratch.units_;
  auto& merges = scratch.merges_;
  units.clear();
  merges.clear();
  int32_t n_partials = 0;
  for (int32_t t = 0; t < batch.n_tokens(); ++t) {
    const int32_t n_blocks = row_blocks(t);
    const int32_t n_chunks = row_chunks(n_blocks);
    for (int32_t kv_head = 0; kv_head < shape.n_head_kv; ++kv_head) {
      if (n_chunks > 1) merges.push_back({t, kv_head, n_partials, n_chunks});
      for (int32_t c = 0; c < n_chunks; ++c) {
        const int32_t partial = n_chunks == 1 ? -1 : n_partials++;
        for (int32_t h = 0; h < group; h += heads) {
          units.push_back({t, kv_head, c * kChunkBlocks, std::min(n_blocks, (c + 1) * kChunkBlocks),
                           partial, h, std::min(static_cast<int32_t>(group), h + heads)});
        }
      }
    }
  }
  if (scratch.partials_.size() < static_cast<size_t>(n_partials) * state_size) {
    scratch.partials_.resize(static_cast<size_t>(n_partials) * state_size);
  }
  const TensorType type = cache.geometry().type;
  // (A Q8_0 row is whole blocks of 32 values.)
  const bool heads_together =
      uses_avx512(isa) && ((type == TensorType::F16 && hd % 16 == 0) || type == TensorType::Q8_0);
  pool.run([&](int part, int n_parts) {
    float* buffer = scratch.part_buffer(part);
    float* own_state = buffer + scratch_floats(group, bs);
    for (size_t u = static_cast<size_t>(part); u < units.size();
         u += static_cast<size_t>(n_parts)) {
      const AttentionScratch::Unit& unit = units[u];
      float* state =
          unit.partial < 0 ? own_state : scratch.partials_.data() + unit.partial * state_size;
      switch (type) {
        case TensorType::F32:
          attend_range<float>(batch, shape, q, cache, layer, unit, false, state, buffer);
          break;
        case TensorType::Q8_0:
          attend_range<BlockQ8_0>(batch, shape, q, cache, layer, unit, heads_together, state,
                                  buffer);
          break;
        default:
          attend_range<uint16_t>(batch, shape, q, cache, layer, unit, heads_together, state,
                                 buffer);
      }
      if (unit.partial < 0) {
        finish(state, 1, group, hd, unit.head_begin, unit.head_end,
               out + (unit.row * shape.n_head + unit.kv_head * group) * hd);
      }
    }
  });
  // Merge the chunked rows' partial states, every head of the group at once.
  for (const AttentionScratch::Merge& m : merges) {
    finish(scratch.partials_.data() + m.first_partial * state_size, m.n_states, group, hd, 0,
           static_cast<int32_t>(group), out + (m.row * shape.n_head + m.kv_head * group) * hd);
  }
}

void attention_ref(const Batch& batch, const AttentionShape& shape, const float* q,
                   const CpuKvCache& cache, int32_t layer, float* out) {
  const int64_t hd = shape.head_dim;
  const int64_t group = shape.n_head / shape.n_head_kv;
  const int32_t bs = cache.geometry().block_size;
  std::vector<float> scores;
  for (int32_t t = 0; t < batch.n_tokens(); ++t) {
    const int32_t* table = batch.block_table(batch.seq_index[t]);
    const int32_t n_keys = batch.positions[t] + 1;
    scores.assign(static_cast<size_t>(n_keys), 0.0f);
    for (int64_t h = 0; h < shape.n_head; ++h) {
      const int64_t kv_head = h / group;
      const float* qh = q + (t * shape.n_head + h) * hd;
      for (int32_t j = 0; j < n_keys; ++j) {
        float s = 0.0f;
        for (int64_t i = 0; i < hd; ++i) {
          s += qh[i] * cache.key(layer, table[j / bs], kv_head, j % bs, i);
        }
        scores[j] = s * shape.scale;
      }
      ref::softmax(scores.data(), n_keys);
      float* oh = out + (t * shape.n_head + h) * hd;
      for (int64_t i = 0; i < hd; ++i) oh[i] = 0.0f;
      for (int32_t j = 0; j < n_keys; ++j) {
        const float p = scores[j];
        for (int64_t i = 0; i < hd; ++i) {
          oh[i] += p * cache.value(layer, table[j / bs], kv_head, j % bs, i);
        }
      }
    }
  }
}

}  // namespace llamaserve::cpu
