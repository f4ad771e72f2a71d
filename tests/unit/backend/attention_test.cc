// Paged attention and RoPE against plain computations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/kv_cache.h"
#include "backend/cpu/rope.h"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace llamaserve::cpu {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// The kernel instruction sets this CPU can run: AVX2 always, AVX-512 where it has it.
std::vector<KernelIsa> kernel_isas() {
  std::vector<KernelIsa> isas = {KernelIsa::kAvx2};
  if (cpu_has_avx512_vnni()) isas.push_back(KernelIsa::kAvx512Vnni);
  return isas;
}

struct AttentionCase {
  TensorType kv_type;
  int64_t n_head;
  int64_t n_head_kv;
  int64_t head_dim;
  int32_t block_size;
};

class PagedAttentionTest : public ::testing::TestWithParam<AttentionCase> {};

// Two sequences with scattered physical blocks; sequence 0 prefills 37 tokens, sequence 1
// has 20 tokens cached and decodes one. The optimized kernel must agree with the reference,
// and the reference with a dense computation on the same K/V values.
TEST_P(PagedAttentionTest, MatchesReferenceAndDenseComputation) {
  const AttentionCase& p = GetParam();
  KvCacheGeometry g;
  g.first_layer = 3;
  g.n_layers = 2;
  g.block_size = p.block_size;
  g.n_blocks = 64;
  g.n_head_kv = p.n_head_kv;
  g.head_dim = p.head_dim;
  g.type = p.kv_type;
  auto cache = CpuKvCache::create(g);
  ASSERT_TRUE(cache.is_ok()) << cache.status().to_string();
  const int64_t kv_dim = g.kv_dim();
  const int64_t q_dim = p.n_head * p.head_dim;

  // Physical blocks in a shuffled order, split between the sequences.
  std::vector<int32_t> physical(64);
  std::iota(physical.begin(), physical.end(), 0);
  std::shuffle(physical.begin(), physical.end(), std::mt19937(5));
  Batch history;  // sequence 1's first 20 tokens, written earlier
  Batch batch;
  for (Batch* b : {&history, &batch}) {
    b->blocks_per_seq = 16;
    b->block_tables.assign(physical.begin(), physical.begin() + 32);
  }
  for (int32_t pos = 0; pos < 20; ++pos) {
    history.tokens.push_back(0);
    history.positions.push_back(pos);
    history.seq_index.push_back(1);
  }
  history.seq_lengths = {1, 20};
  for (int32_t pos = 0; pos < 37; ++pos) {
    batch.tokens.push_back(0);
    batch.positions.push_back(pos);
    batch.seq_index.push_back(0);
  }
  batch.tokens.push_back(0);
  batch.positions.push_back(20);
  batch.seq_index.push_back(1);
  batch.seq_lengths = {37, 21};

  const std::vector<float> hk = random_floats(20 * kv_dim, 1), hv = random_floats(20 * kv_dim, 2);
  (*cache)->write(history, 4, hk.data(), hv.data());
  const int32_t n = batch.n_tokens();
  const std::vector<float> k = random_floats(n * kv_dim, 3), v = random_floats(n * kv_dim, 4);
  (*cache)->write(batch, 4, k.data(), v.data());
  const std::vector<float> q = random_floats(n * q_dim, 5);

  const AttentionShape shape{p.n_head, p.n_head_kv, p.head_dim,
                             1.0f / std::sqrt(static_cast<float>(p.head_dim))};
  std::vector<float> fast(n * q_dim), ref(n * q_dim);
  ThreadPool pool(2);
  AttentionScratch scratch(shape, g.block_size, pool.size());
  attention(batch, shape, q.data(), **cache, 4, fast.data(), pool, scratch, KernelIsa::kAvx2);
  attention_ref(batch, shape, q.data(), **cache, 4, ref.data());
  for (int64_t i = 0; i < n * q_dim; ++i) ASSERT_NEAR(fast[i], ref[i], 1e-5f) << i;
  // The AVX-512 path gives the same bits (attention_avx512.h).
  for (KernelIsa isa : kernel_isas()) {
    std::vector<float> other(n * q_dim);
    attention(batch, shape, q.data(), **cache, 4, other.data(), pool, scratch, isa);
    for (int64_t i = 0; i < n * q_dim; ++i)
      ASSERT_EQ(other[i], fast[i]) << kernel_isa_name(isa) << " " << i;
  }

  // Dense check of sequence 1's decode row with the K/V values as stored (f16-rounded, or
  // the head's row quantized to Q8_0 blocks and back).
  auto stored = [&](const std::vector<float>& src, int64_t i) -> float {
    if (p.kv_type == TensorType::F16) return half_to_float(float_to_half(src[i]));
    if (p.kv_type != TensorType::Q8_0) return src[i];
    const int64_t row_start = i - i % p.head_dim;
    std::vector<uint8_t> blocks(row_bytes(TensorType::Q8_0, static_cast<size_t>(p.head_dim)));
    std::vector<float> row(static_cast<size_t>(p.head_dim));
    EXPECT_TRUE(
        quantize_row(TensorType::Q8_0, src.data() + row_start, blocks.data(), p.head_dim).is_ok());
    EXPECT_TRUE(dequantize_row(TensorType::Q8_0, blocks.data(), row.data(), p.head_dim).is_ok());
    return row[static_cast<size_t>(i - row_start)];
  };
  const int64_t group = p.n_head / p.n_head_kv;
  for (int64_t h = 0; h < p.n_head; ++h) {
    const int64_t kvh = h / group;
    std::vector<double> scores(21);
    for (int32_t j = 0; j < 21; ++j) {
      double s = 0;
      for (int64_t i = 0; i < p.head_dim; ++i) {
        const int64_t idx = kvh * p.head_dim + i;
        const double key = j < 20 ? stored(hk, j * kv_dim + idx) : stored(k, 37 * kv_dim + idx);
        s += q[37 * q_dim + h * p.head_dim + i] * key;
      }
      scores[j] = s * shape.scale;
    }
    const double max = *std::max_element(scores.begin(), scores.end());
    double sum = 0;
    for (double& s : scores) sum += (s = std::exp(s - max));
    for (int64_t i = 0; i < p.head_dim; ++i) {
      double o = 0;
      const int64_t idx = kvh * p.head_dim + i;
      for (int32_t j = 0; j < 21; ++j) {
        o += scores[j] / sum *
             (j < 20 ? stored(hv, j * kv_dim + idx) : stored(v, 37 * kv_dim + idx));
      }
      ASSERT_NEAR(ref[37 * q_dim + h * p.head_dim + i], o, 1e-5) << h << " " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, PagedAttentionTest,
                         ::testing::Values(AttentionCase{TensorType::F16, 4, 4, 64, 16},
                                           AttentionCase{TensorType::F32, 4, 4, 64, 16},
                                           AttentionCase{TensorType::F16, 9, 3, 64, 16},
                                           AttentionCase{TensorType::F16, 8, 2, 128, 32},
                                           AttentionCase{TensorType::F16, 14, 2, 48, 7},
                                           AttentionCase{TensorType::F16, 5, 1, 80, 9},
                                           AttentionCase{TensorType::F16, 8, 4, 16, 16},
                                           AttentionCase{TensorType::F16, 4, 1, 40, 16},
                                           AttentionCase{TensorType::F32, 6, 1, 40, 7},
                                           AttentionCase{TensorType::Q8_0, 4, 4, 64, 16},
                                           AttentionCase{TensorType::Q8_0, 9, 3, 64, 16},
                                           AttentionCase{TensorType::Q8_0, 8, 2, 128, 32},
                                           AttentionCase{TensorType::Q8_0, 6, 2, 96, 7},
                                           AttentionCase{TensorType::Q8_0, 14, 2, 32, 9}));

// Rows longer than one work unit (256 keys) are split into chunks and merged: the result
// matches the reference, and a row gives the same bits alone as inside a larger batch and with
// any number of threads (a row alone on many threads is split by query heads as well).
TEST(PagedAttention, RowsAreSplitConsistently) {
  const KvCacheGeometry g{
      .n_layers = 1, .block_size = 16, .n_blocks = 64, .n_head_kv = 2, .head_dim = 64};
  auto cache = CpuKvCache::create(g);
  ASSERT_TRUE(cache.is_ok());
  const int64_t kv_dim = g.kv_dim(), q_dim = 4 * 64;
  Batch history;
  history.blocks_per_seq = 64;
  for (int32_t i = 0; i < 64; ++i) history.block_tables.push_back(63 - i);
  for (int32_t pos = 0; pos < 700; ++pos) {
    history.tokens.push_back(0);
    history.positions.push_back(pos);
    history.seq_index.push_back(0);
  }
  history.seq_lengths = {700};
  const std::vector<float> k = random_floats(700 * kv_dim, 21), v = random_floats(700 * kv_dim, 22);
  (*cache)->write(history, 0, k.data(), v.data());

  // Rows at positions 0, 40, 200, 255, 256, 511, 699: one chunk for the first four, then two,
  // two and three.
  Batch batch = history;
  batch.tokens.clear();
  batch.positions.clear();
  batch.seq_index.clear();
  const std::vector<int32_t> positions = {0, 40, 200, 255, 256, 511, 699};
  for (int32_t pos : positions) {
    batch.tokens.push_back(0);
    batch.positions.push_back(pos);
    batch.seq_index.push_back(0);
  }
  const std::vector<float> q = random_floats(positions.size() * q_dim, 23, 0.5f);
  const AttentionShape shape{4, 2, 64, 0.125f};
  ThreadPool pool(2);
  AttentionScratch scratch(shape, 16, pool.size());
  std::vector<float> fast(positions.size() * q_dim), ref(positions.size() * q_dim);
  attention(batch, shape, q.data(), **cache, 0, fast.data(), pool, scratch, KernelIsa::kAvx2);
  attention_ref(batch, shape, q.data(), **cache, 0, ref.data());
  for (size_t i = 0; i < fast.size(); ++i) ASSERT_NEAR(fast[i], ref[i], 1e-5f) << i;

  // Each row alone, on one, five and sixteen threads (its heads split into units of one, two
  // or all of the group), with every instruction set.
  for (KernelIsa isa : kernel_isas()) {
    for (int threads : {1, 5, 16}) {
      ThreadPool row_pool(threads);
      AttentionScratch row_scratch(shape, 16, row_pool.size());
      for (size_t r = 0; r < positions.size(); ++r) {
        Batch alone = batch;
        alone.tokens = {0};
        alone.positions = {positions[r]};
        alone.seq_index = {0};
        std::vector<float> single(q_dim);
        attention(alone, shape, q.data() + r * q_dim, **cache, 0, single.data(), row_pool,
                  row_scratch, isa);
        for (int64_t i = 0; i < q_dim; ++i) {
          ASSERT_EQ(single[i], fast[r * q_dim + i])
              << "row " << r << ", threads " << threads << ", " << kernel_isa_name(isa);
        }
      }
    }
  }
}

// The AVX-512 path against the AVX2 one, bit for bit, on random shapes: group sizes 1-8 (more
// than one pass of heads), head sizes that leave a 16-value slice, block sizes that leave keys
// past the last multiple of 8, several sequences of prompt and decode rows, 1-3 threads.
TEST(PagedAttention, InstructionSetsAgreeOnRandomShapes) {
  if (!cpu_has_avx512_vnni()) GTEST_SKIP() << "this CPU has no AVX-512 VNNI";
  std::mt19937 rng(77);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int round = 0; round < 40; ++round) {
    const TensorType type = round % 2 == 0 ? TensorType::F16 : TensorType::Q8_0;
    const int64_t n_head_kv = pick(1, 3), group = pick(1, 8);
    const int64_t head_dim = type == TensorType::Q8_0 ? 32 * pick(1, 4) : 16 * pick(1, 8);
    KvCacheGeometry g;
    g.n_layers = 1;
    g.block_size = pick(1, 33);
    g.n_head_kv = n_head_kv;
    g.head_dim = head_dim;
    g.type = type;
    const int32_t n_seqs = pick(1, 3), max_len = pick(1, 300);
    const int32_t blocks_per_seq = (max_len + g.block_size - 1) / g.block_size;
    g.n_blocks = n_seqs * blocks_per_seq;
    auto cache = CpuKvCache::create(g);
    ASSERT_TRUE(cache.is_ok()) << cache.status().to_string();
    Batch history;
    history.blocks_per_seq = blocks_per_seq;
    for (int32_t b = 0; b < g.n_blocks; ++b) history.block_tables.push_back(g.n_blocks - 1 - b);
    std::vector<int32_t> lengths;
    for (int32_t seq = 0; seq < n_seqs; ++seq) {
      lengths.push_back(pick(1, max_len));
      for (int32_t pos = 0; pos < lengths.back(); ++pos) {
        history.tokens.push_back(0);
        history.positions.push_back(pos);
        history.seq_index.push_back(seq);
      }
    }
    history.seq_lengths = lengths;
    const int64_t kv_dim = g.kv_dim(), q_dim = n_head_kv * group * head_dim;
    const std::vector<float> k = random_floats(history.n_tokens() * kv_dim, 100 + round),
                             v = random_floats(history.n_tokens() * kv_dim, 200 + round);
    (*cache)->write(history, 0, k.data(), v.data());
    // Rows: the last few positions of each sequence (a prompt's tail, or one decode).
    Batch batch = history;
    batch.tokens.clear();
    batch.positions.clear();
    batch.seq_index.clear();
    for (int32_t seq = 0; seq < n_seqs; ++seq) {
      const int32_t n_rows = std::min(lengths[seq], pick(1, 5));
      for (int32_t pos = lengths[seq] - n_rows; pos < lengths[seq]; ++pos) {
        batch.tokens.push_back(0);
        batch.positions.push_back(pos);
        batch.seq_index.push_back(seq);
      }
    }
    const std::vector<float> q = random_floats(batch.n_tokens() * q_dim, 300 + round, 0.5f);
    const AttentionShape shape{n_head_kv * group, n_head_kv, head_dim,
                               1.0f / std::sqrt(static_cast<float>(head_dim))};
    ThreadPool pool(pick(1, 3));
    AttentionScratch scratch(shape, g.block_size, pool.size());
    std::vector<float> avx2(batch.n_tokens() * q_dim), avx512(avx2.size());
    attention(batch, shape, q.data(), **cache, 0, avx2.data(), pool, scratch, KernelIsa::kAvx2);
    attention(batch, shape, q.data(), **cache, 0, avx512.data(), pool, scratch,
              KernelIsa::kAvx512Vnni);
    for (size_t i = 0; i < avx2.size(); ++i) {
      ASSERT_EQ(avx512[i], avx2[i])
          << "round " << round << " (" << type_name(type) << ", " << n_head_kv << " x " << group
          << " heads of " << head_dim << ", blocks of " << g.block_size << "), value " << i;
    }
  }
}

// Each thread's scratch starts a cache line of its own: SmolLM2's shape needs 249 floats a part,
// which would otherwise put one part's last values and the next part's first in one line.
TEST(PagedAttention, ScratchPartsStartCacheLines) {
  const AttentionShape shape{9, 3, 64, 0.125f};
  for (int32_t block_size : {16, 17, 32}) {
    AttentionScratch scratch(shape, block_size, 4);
    for (int part = 0; part < 4; ++part) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(scratch.part_buffer(part)) % kCacheLineBytes, 0u)
          << "block size " << block_size << ", part " << part;
    }
  }
}

// Disjoint token ranges written by different threads at once store what one write of the
// batch stores, for every cache type.
TEST(KvCache, TokenRangesFromThreadsEqualOneWrite) {
  for (TensorType type : {TensorType::F32, TensorType::F16, TensorType::Q8_0}) {
    const KvCacheGeometry g{.n_layers = 1,
                            .block_size = 16,
                            .n_blocks = 8,
                            .n_head_kv = 3,
                            .head_dim = 64,
                            .type = type};
    auto whole = CpuKvCache::create(g);
    auto ranges = CpuKvCache::create(g);
    ASSERT_TRUE(whole.is_ok() && ranges.is_ok());
    Batch batch;
    batch.blocks_per_seq = 4;
    batch.block_tables = {5, 2, 7, 0, 1, 6, 3, 4};
    for (int32_t pos = 0; pos < 45; ++pos) {
      batch.tokens.push_back(0);
      batch.positions.push_back(pos % 40);
      batch.seq_index.push_back(pos < 40 ? 0 : 1);
    }
    batch.seq_lengths = {40, 5};
    const int64_t kv_dim = g.kv_dim();
    const std::vector<float> k = random_floats(45 * kv_dim, 8), v = random_floats(45 * kv_dim, 9);
    (*whole)->write(batch, 0, k.data(), v.data());
    ThreadPool pool(3);
    pool.parallel_for(45, 1, [&](size_t begin, size_t end) {
      (*ranges)->write_tokens(batch, 0, k.data(), v.data(), static_cast<int32_t>(begin),
                              static_cast<int32_t>(end));
    });
    // (Only the written slots: the rest of the cache is uninitialised memory.)
    for (int32_t t = 0; t < batch.n_tokens(); ++t) {
      const int32_t pos = batch.positions[t];
      const int32_t block = batch.block_table(batch.seq_index[t])[pos / g.block_size];
      const int32_t slot = pos % g.block_size;
      for (int64_t h = 0; h < g.n_head_kv; ++h) {
        for (int64_t d = 0; d < g.head_dim; ++d) {
          ASSERT_EQ((*ranges)->key(0, block, h, slot, d), (*whole)->key(0, block, h, slot, d))
              << type_name(type) << " token " << t << " head " << h << " value " << d;
          ASSERT_EQ((*ranges)->value(0, block, h, slot, d), (*whole)->value(0, block, h, slot, d))
              << type_name(type) << " token " << t << " head " << h << " value " << d;
        }
      }
    }
  }
}

TEST(KvCache, RejectsBadGeometry) {
  KvCacheGeometry g;
  g.n_layers = 1;
  g.n_blocks = 4;
  g.n_head_kv = 1;
  g.head_dim = 8;
  g.type = TensorType::Q4_0;
  EXPECT_EQ(CpuKvCache::create(g).status().code(), StatusCode::kUnsupported);
  g.type = TensorType::F16;
  g.block_size = 0;
  EXPECT_EQ(CpuKvCache::create(g).status().code(), StatusCode::kInvalidArgument);
  g.block_size = 16;
  EXPECT_TRUE(CpuKvCache::create(g).is_ok());
  EXPECT_EQ((*CpuKvCache::create(g))->info().bytes_per_block, 2u * 16 * 8 * 2);
  // Q8_0 rows are whole blocks of 32: 34 bytes for every 32 values of a head.
  g.type = TensorType::Q8_0;
  EXPECT_EQ(CpuKvCache::create(g).status().code(), StatusCode::kUnsupported);
  g.head_dim = 64;
  g.n_head_kv = 3;
  ASSERT_TRUE(CpuKvCache::create(g).is_ok());
  EXPECT_EQ((*CpuKvCache::create(g))->info().bytes_per_block, 2u * 16 * 3 * 68);
}

ModelConfig rope_config(int64_t head_dim, RopeScaling scaling) {
  ModelConfig c;
  c.head_dim = head_dim;
  c.rope_dim = head_dim;
  c.rope_theta = 10000.0f;
  c.rope_scaling = scaling;
  return c;
}

// Each ordering against the rotation written out with explicit pair indices.
TEST(Rope, BothOrderingsRotateTheirPairs) {
  const int64_t hd = 16, n_heads = 2;
  const ModelConfig c = rope_config(hd, {});
  const std::vector<float> inv = rope_inv_freq(c, nullptr);
  const int32_t pos = 7;
  std::vector<float> cos(hd / 2), sin(hd / 2);
  rope_cos_sin(inv, &pos, 1, cos.data(), sin.data());
  const std::vector<float> x = random_floats(n_heads * hd, 11);
  for (RopeOrdering ordering : {RopeOrdering::kNormal, RopeOrdering::kNeox}) {
    std::vector<float> y = x;
    rope_apply(y.data(), n_heads, hd, hd, ordering, cos.data(), sin.data());
    for (int64_t h = 0; h < n_heads; ++h) {
      for (int64_t i = 0; i < hd / 2; ++i) {
        const int64_t a = ordering == RopeOrdering::kNormal ? 2 * i : i;
        const int64_t b = ordering == RopeOrdering::kNormal ? 2 * i + 1 : i + hd / 2;
        const double angle = pos * std::pow(10000.0, -2.0 * i / hd);
        const double x0 = x[h * hd + a], x1 = x[h * hd + b];
        EXPECT_NEAR(y[h * hd + a], x0 * std::cos(angle) - x1 * std::sin(angle), 1e-5);
        EXPECT_NEAR(y[h * hd + b], x0 * std::sin(angle) + x1 * std::cos(angle), 1e-5);
      }
    }
  }
}

// q·k after RoPE depends only on the distance between positions.
TEST(Rope, DotProductDependsOnRelativePosition) {
  const int64_t hd = 64;
  const ModelConfig c = rope_config(hd, {});
  const std::vector<float> inv = rope_inv_freq(c, nullptr);
  const std::vector<float> q = random_floats(hd, 12), k = random_floats(hd, 13);
  auto rotated_dot = [&](int32_t pq, int32_t pk) {
    std::vector<float> cq(hd / 2), sq(hd / 2), ck(hd / 2), sk(hd / 2);
    rope_cos_sin(inv, &pq, 1, cq.data(), sq.data());
    rope_cos_sin(inv, &pk, 1, ck.data(), sk.data());
    std::vector<float> a = q, b = k;
    rope_apply(a.data(), 1, hd, hd, RopeOrdering::kNormal, cq.data(), sq.data());
    rope_apply(b.data(), 1, hd, hd, RopeOrdering::kNormal, ck.data(), sk.data());
    double s = 0;
    for (int64_t i = 0; i < hd; ++i) s += a[i] * b[i];
    return s;
  };
  EXPECT_NEAR(rotated_dot(10, 3), rotated_dot(107, 100), 1e-3);
  EXPECT_NEAR(rotated_dot(5, 5), rotated_dot(0, 0), 1e-3);
}

TEST(Rope, PartialRotaryDimsLeaveTheRestAlone) {
  const std::vector<float> x = random_floats(32, 14);
  std::vector<float> y = x;
  const std::vector<float> cos(8, 0.0f), sin(8, 1.0f);  // a quarter turn
  rope_apply(y.data(), 1, 32, 16, RopeOrdering::kNeox, cos.data(), sin.data());
  for (int i = 0; i < 8; ++i) {
    EXPECT_FLOAT_EQ(y[i], -x[i + 8]);
    EXPECT_FLOAT_EQ(y[i + 8], x[i]);
  }
  for (int i = 16; i < 32; ++i) EXPECT_EQ(y[i], x[i]);
}

TEST(Rope, ScalingFrequencies) {
  const int64_t hd = 128;
  const std::vector<float> base = rope_inv_freq(rope_config(hd, {}), nullptr);
  RopeScaling linear;
  linear.type = RopeScalingType::kLinear;
  linear.factor = 4.0f;
  const std::vector<float> lin = rope_inv_freq(rope_config(hd, linear), nullptr);
  for (size_t i = 0; i < base.size(); ++i) EXPECT_FLOAT_EQ(lin[i], base[i] / 4.0f);

  RopeScaling llama3;
  llama3.type = RopeScalingType::kLlama3;
  llama3.factor = 8.0f;
  llama3.low_freq_factor = 1.0f;
  llama3.high_freq_factor = 4.0f;
  llama3.original_context_length = 8192;
  ModelConfig c3 = rope_config(hd, llama3);
  c3.rope_theta = 500000.0f;
  const std::vector<float> plain3 = rope_inv_freq(rope_config(hd, {}), nullptr);
  ModelConfig c3_plain = rope_config(hd, {});
  c3_plain.rope_theta = 500000.0f;
  const std::vector<float> unscaled = rope_inv_freq(c3_plain, nullptr);
  const std::vector<float> scaled = rope_inv_freq(c3, nullptr);
  for (size_t i = 0; i < scaled.size(); ++i) {
    const double wavelen = 2 * M_PI / unscaled[i];
    if (wavelen < 8192.0 / 4.0) {
      EXPECT_FLOAT_EQ(scaled[i], unscaled[i]);  // high frequencies kept
    } else if (wavelen > 8192.0) {
      EXPECT_FLOAT_EQ(scaled[i], unscaled[i] / 8.0f);  // low frequencies slowed down
    } else {
      EXPECT_LT(scaled[i], unscaled[i]);
      EXPECT_GT(scaled[i], unscaled[i] / 8.0f);
    }
  }
  // A rope_freqs tensor divides elementwise and overrides the metadata.
  std::vector<float> factors(hd / 2, 2.0f);
  const std::vector<float> with_factors = rope_inv_freq(c3, factors.data());
  for (size_t i = 0; i < scaled.size(); ++i) EXPECT_FLOAT_EQ(with_factors[i], unscaled[i] / 2.0f);
  (void)plain3;
}

}  // namespace
}  // namespace llamaserve::cpu
