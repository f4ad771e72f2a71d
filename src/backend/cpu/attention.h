// Causal grouped-query attention over the paged KV cache, for every token row of a Batch.
// Row t of sequence s attends to positions [0, positions[t]] of s, read through s's block
// table; the batch's own K/V must already be in the cache (CpuKvCache::write).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/batch.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/kv_cache.h"
#include "core/aligned_vector.h"
#include "core/thread_pool.h"

namespace llamaserve::cpu {

struct AttentionShape {
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  float scale = 0.0f;  // usually 1 / sqrt(head_dim)
};

// Working memory of the optimized kernel for each part of the pool's regions (one part
// per thread), allocated once; each part's in cache lines of its own.
class AttentionScratch {
 public:
  AttentionScratch(const AttentionShape& shape, int32_t block_size, int n_threads);
  float* part_buffer(int part) { return buffer_.data() + static_cast<size_t>(part) * per_part_; }

  // One work unit of attention(): a row, a KV head, a range of its cache blocks and a range
  // of the query heads that share the KV head (0 .. n_head / n_head_kv).
  struct Unit {
    int32_t row;
    int32_t kv_head;
    int32_t block_begin;
    int32_t block_end;
    int32_t partial;  // index of its partial state, or -1 when the unit covers the whole row
    int32_t head_begin;
    int32_t head_end;
  };
  // The consecutive partial states of one row and KV head, merged after the parallel region.
  struct Merge {
    int32_t row;
    int32_t kv_head;
    int32_t first_partial;
    int32_t n_states;
  };
  // Grown to the largest batch seen, then reused.
  std::vector<Unit> units_;
  std::vector<Merge> merges_;
  CacheAlignedVector<float> partials_;

 private:
  size_t per_part_;
  CacheAlignedVector<float> buffer_;
};

// q and out: [n_tokens, n_head * head_dim]. Work is split over (token, KV head, chunk of up to
// 256 keys) units; each unit runs the heads of its group together so that K/V are read once,
// with an online softmax per cache block, and chunks of a long row are merged at the end.
// When those units are too few for the threads, they are split by query heads too. A row's
// result depends only on the row, never on the rest of the batch or the thread count.
// `isa`: with the AVX-512 ones (only where the CPU has them) an f16 cache is read with the AVX-512
// pieces of attention_avx512.h, the same bits as kAvx2.
void attention(const Batch& batch, const AttentionShape& shape, const float* q,
               const CpuKvCache& cache, int32_t layer, float* out, ThreadPool& pool,
               AttentionScratch& scratch, KernelIsa isa);

// Plain reference: per (token, head), all scores, a max-subtracted softmax, then the
// weighted sum of V. Same inputs and outputs as attention().
void attention_ref(const Batch& batch, const AttentionShape& shape, const float* q,
                   const CpuKvCache& cache, int32_t layer, float* out);

}  // namespace llamaserve::cpu
