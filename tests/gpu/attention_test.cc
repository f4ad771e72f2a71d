// The attention kernels against a CPU reference of causal grouped-query attention over the
// paged KV cache: KV writes, decode and prefill tiles, flash-decoding splits, the CUDA-core,
// tensor-core and decode kernels over f16 and Q8_0 caches (the cases: attention_test_cases.cc;
// the shapes the kernels refuse: attention_kernel_choice_test.cc).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>

#include "attention_test_cases.h"
#include "backend/cpu/ref_kernels.h"
#include "backend/cuda/act_quant.h"
#include "backend/cuda/attention.h"
#include "backend/cuda/attention_decode.h"
#include "quant/blocks.h"
#include "test_util.h"

namespace llamaserve::cuda::testing {
namespace {

// ---------------------------------------------------------------------------------------
// KV cache and attention

// One K or V array of a layer's cache on the host, as the kernels hold it (attention.h): f16
// values, or Q8_0 codes and scales, with the bytes write_kv must produce.
struct HostKvArray {
  KvType type = KvType::kF16;
  std::vector<uint16_t> halves;
  std::vector<int8_t> codes;
  std::vector<uint16_t> scales;

  HostKvArray(KvType t, const std::vector<float>& values) : type(t) {
    if (type == KvType::kF16) {
      halves.resize(values.size());
    } else {
      codes.resize(values.size());
      scales.resize(values.size() / kKvQ8Block);
    }
    store(0, values.data(), static_cast<int64_t>(values.size()));
  }
  // Values [at, at + n) (at and n multiples of 32 for Q8_0), encoded as the host's Q8_0
  // encoder does.
  void store(size_t at, const float* x, int64_t n) {
    if (type == KvType::kF16) {
      for (int64_t i = 0; i < n; ++i) halves[at + i] = float_to_half(x[i]).bits;
      return;
    }
    std::vector<BlockQ8_0> blocks(static_cast<size_t>(n / kKvQ8Block));
    ASSERT_OK(quantize_row(TensorType::Q8_0, x, blocks.data(), n));
    for (size_t b = 0; b < blocks.size(); ++b) {
      scales[at / kKvQ8Block + b] = blocks[b].d.bits;
      std::memcpy(&codes[at + b * kKvQ8Block], blocks[b].qs, kKvQ8Block);
    }
  }
  double value(size_t i) const {
    if (type == KvType::kF16) return half_to_float(Half{halves[i]});
    return static_cast<double>(codes[i]) * half_to_float(Half{scales[i / kKvQ8Block]});
  }
};

// The same on the device.
struct DeviceKvArray {
  DeviceArray<uint16_t> halves;
  DeviceArray<int8_t> codes;
  DeviceArray<uint16_t> scales;

  explicit DeviceKvArray(const HostKvArray& h)
      : halves(h.halves), codes(h.codes), scales(h.scales) {}
  void* data() const {
    return halves.size() > 0 ? static_cast<void*>(halves.get()) : static_cast<void*>(codes.get());
  }
  void* scale_data() const { return scales.size() > 0 ? scales.get() : nullptr; }
  void expect_equal(const HostKvArray& h, const char* what) const {
    EXPECT_EQ(halves.download(), h.halves) << what;
    EXPECT_EQ(codes.download(), h.codes) << what;
    EXPECT_EQ(scales.download(), h.scales) << what;
  }
};

class AttentionTest : public GpuTest, public ::testing::WithParamInterface<AttentionCase> {};

TEST_P(AttentionTest, MatchesReference) {
  const AttentionCase c = GetParam();
  const bool by_name = c.kernel == AttentionKernel::kTensorCores;
  const int block_size = c.block_size;
  const int group = c.n_head / c.n_head_kv;
  const int64_t kv_dim = static_cast<int64_t>(c.n_head_kv) * c.head_dim;
  const int64_t q_dim = static_cast<int64_t>(c.n_head) * c.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));

  // Block tables: a shuffled permutation of physical blocks, so that logical and physical
  // order differ.
  int blocks_per_seq = 0, total_blocks = 0;
  for (auto [cached, added] : c.seqs) {
    const int blocks = (cached + added + block_size - 1) / block_size;
    blocks_per_seq = std::max(blocks_per_seq, blocks);
    total_blocks += blocks;
  }
  total_blocks += 3;  // unused blocks
  std::vector<int32_t> physical(total_blocks);
  std::iota(physical.begin(), physical.end(), 0);
  std::shuffle(physical.begin(), physical.end(), std::mt19937(7));
  std::vector<int32_t> tables(c.seqs.size() * blocks_per_seq, -1);
  int next = 0;
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    const int blocks = (c.seqs[s].first + c.seqs[s].second + block_size - 1) / block_size;
    for (int i = 0; i < blocks; ++i) tables[s * blocks_per_seq + i] = physical[next++];
  }

  // Cache with random history; the batch's rows are written by write_kv.
  const size_t cache_elems = static_cast<size_t>(total_blocks) * block_size * kv_dim;
  HostKvArray k_cache(c.kv_type, random_floats(cache_elems, 31)),
      v_cache(c.kv_type, random_floats(cache_elems, 32));
  std::vector<int32_t> positions, seq_index;
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    for (int i = 0; i < c.seqs[s].second; ++i) {
      positions.push_back(c.seqs[s].first + i);
      seq_index.push_back(static_cast<int32_t>(s));
    }
  }
  const int64_t rows = static_cast<int64_t>(positions.size());
  const int64_t q_stride = q_dim + 4, out_stride = q_dim + 2;
  const std::vector<float> q = random_floats(rows * q_stride, 33);
  const std::vector<float> k_new = random_floats(rows * kv_dim, 34),
                           v_new = random_floats(rows * kv_dim, 35);

  // Tiles: consecutive rows of one sequence, at most kMaxAttentionQueries / group rows each.
  const int max_rows = std::max(1, kMaxAttentionQueries / group);
  std::vector<AttentionTile> tiles;
  int max_tile_rows = 1;
  for (int64_t r = 0; r < rows;) {
    int n = 1;
    while (r + n < rows && n < max_rows && seq_index[r + n] == seq_index[r]) ++n;
    tiles.push_back({static_cast<int32_t>(r), n});
    max_tile_rows = std::max(max_tile_rows, n);
    r += n;
  }
  // Leading one-row tiles (decode rows ahead of prompt chunks): with kAuto they run on the
  // decode kernel, the rest on their own kernel.
  int single_rows = 0;
  while (single_rows < static_cast<int>(tiles.size()) && tiles[single_rows].n_rows == 1) {
    ++single_rows;
  }
  int n_splits = c.n_splits;
  if (c.row_split_positions > 0) {
    ASSERT_GT(single_rows, 0) << "split tiles are the leading one-row tiles";
    std::vector<AttentionTile> split;
    n_splits = 1;
    for (int r = 0; r < single_rows; ++r) {
      const int splits =
          std::max(1, (positions[r] + c.row_split_positions) / c.row_split_positions);
      for (int s = 0; s < splits; ++s) split.push_back({r, 1, s, splits});
      n_splits = std::max(n_splits, splits);
    }
    if (single_rows == static_cast<int>(tiles.size())) n_splits = std::max(n_splits, c.n_splits);
    split.insert(split.end(), tiles.begin() + single_rows, tiles.end());
    tiles = split;
  }

  const DeviceKvArray k_dev(k_cache), v_dev(v_cache);
  DeviceArray<float> q_dev(q), k_new_dev(k_new), v_new_dev(v_new), out_dev(rows * out_stride);
  DeviceArray<int32_t> pos_dev(positions), seq_dev(seq_index), table_dev(tables);
  DeviceArray<AttentionTile> tile_dev(tiles);
  DeviceArray<float> partial(std::max<int64_t>(
      1, attention_workspace_floats(rows, c.n_head, c.head_dim, std::max(n_splits, c.n_splits))));
  const std::vector<unsigned int> zero_counters(static_cast<size_t>(rows * c.n_head_kv), 0u);
  DeviceArray<unsigned int> row_split_counters(zero_counters);
  out_dev.poison();
  partial.poison();

  KvWriteArgs w;
  w.k = k_new_dev.get();
  w.k_stride = kv_dim;
  w.v = v_new_dev.get();
  w.v_stride = kv_dim;
  w.type = c.kv_type;
  w.k_cache = k_dev.data();
  w.v_cache = v_dev.data();
  w.k_scales = k_dev.scale_data();
  w.v_scales = v_dev.scale_data();
  w.positions = pos_dev.get();
  w.seq_index = seq_dev.get();
  w.block_tables = table_dev.get();
  w.blocks_per_seq = blocks_per_seq;
  w.block_size = block_size;
  w.n_rows = rows;
  w.kv_dim = kv_dim;
  cudaStream_t created = nullptr;
  if (c.earlier_kv_settled) {
    ASSERT_CUDA(cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking));
  }
  const std::unique_ptr<CUstream_st, decltype(&cudaStreamDestroy)> stream_owner(created,
                                                                                cudaStreamDestroy);
  const cudaStream_t stream = created;
  ASSERT_OK(write_kv(w, stream));

  AttentionArgs a;
  a.q = q_dev.get();
  a.q_stride = q_stride;
  a.kv_type = c.kv_type;
  a.k_cache = k_dev.data();
  a.v_cache = v_dev.data();
  a.k_scales = k_dev.scale_data();
  a.v_scales = v_dev.scale_data();
  a.positions = pos_dev.get();
  a.seq_index = seq_dev.get();
  a.block_tables = table_dev.get();
  a.blocks_per_seq = blocks_per_seq;
  a.block_size = block_size;
  a.tiles = tile_dev.get();
  a.n_tiles = static_cast<int32_t>(tiles.size());
  a.max_tile_rows = max_tile_rows;
  while (a.single_row_tiles < a.n_tiles && tiles[a.single_row_tiles].n_rows == 1)
    ++a.single_row_tiles;
  a.single_rows = single_rows;
  a.n_head = c.n_head;
  a.n_head_kv = c.n_head_kv;
  a.head_dim = c.head_dim;
  a.scale = scale;
  a.out = out_dev.get();
  a.out_stride = out_stride;
  a.n_splits = n_splits;
  a.partial = partial.get();
  if (c.row_split_positions > 0) {
    a.split_tiles = true;
    a.rest_splits = c.n_splits;
  }
  if (c.row_split_positions > 0 || c.split_counters) a.split_counters = row_split_counters.get();
  a.n_batch_rows = rows;
  a.kernel = c.kernel;
  a.decode_warps = c.decode_warps;
  a.decode_mma_group = c.decode_mma_group;
  a.earlier_kv_settled = c.earlier_kv_settled;
  // The output also as 8-bit blocks (for the output projection's integer matvec), which only
  // the CUDA-core kernel writes.
  DeviceArray<uint8_t> out_q8(q8_rows_bytes(rows, q_dim));
  out_q8.poison();
  const bool q8_output = !by_name || c.n_splits > 1;  // the reduction writes them
  // The kernel that runs (attention.h): kAuto takes tensor cores for tiles of 16 query vectors
  // or more, unless one split would have to write 8-bit output. Their f16 probabilities need the
  // relative tolerance.
  const bool tensor_cores =
      by_name || (c.kernel == AttentionKernel::kAuto && max_tile_rows * group >= 16 &&
                  (c.n_splits > 1 || !q8_output));
  // Where the decode kernel's rows (by name, or kAuto's leading one-row tiles) run on tensor
  // cores too (a Q8_0 cache, an f16 cache's grouped queries): f16 Q, K values and probabilities,
  // the same relative tolerance.
  std::vector<bool> relative_tolerance(static_cast<size_t>(rows), tensor_cores);
  const int decode_tiles = c.kernel == kDecode ? a.n_tiles : a.single_row_tiles;
  const int64_t decode_rows = a.split_tiles ? a.single_rows : decode_tiles;
  if ((c.kernel == kDecode || c.kernel == kAuto) &&
      decode_on_tensor_cores(c.kv_type, group, block_size, decode_rows * c.n_head_kv,
                             current_device_sm_count(), c.decode_mma_group)) {
    for (int i = 0; i < decode_tiles; ++i) {
      relative_tolerance[tiles[i].first_row] = true;
    }
  }
  if (q8_output) a.out_q = q8_rows_view(out_q8.get(), rows, q_dim);
  // The output also as halves (a GEMM output projection's input), written by the decode kernel
  // or converted after the others: f16, or bf16 for the Q8_0 cache's cases.
  const int64_t half_stride = q_dim + 6;
  DeviceArray<uint16_t> out_half(rows * half_stride);
  out_half.poison();
  const HalfType half_type = c.kv_type == KvType::kQ8_0 ? HalfType::kBF16 : HalfType::kF16;
  a.out_half = HalfRows{out_half.get(), half_stride, half_type};
  ASSERT_OK(configure_attention_kernels());
  ASSERT_OK(attention(a, stream));
  ASSERT_CUDA(cudaDeviceSynchronize());
  EXPECT_EQ(count_half_mismatches(out_dev.download(), out_stride, rows, q_dim, out_half.download(),
                                  half_stride, half_type),
            0)
      << "half output";
  if (q8_output) {
    EXPECT_EQ(count_q8_mismatches(out_dev.download(), out_stride, rows, q_dim, out_q8, a.out_q), 0)
        << "8-bit output";
  }
  if (c.row_split_positions > 0 || c.split_counters) {
    EXPECT_EQ(row_split_counters.download(), zero_counters) << "split counters back at zero";
  }
  // The decode kernel combining its own splits (split counters, no reduce kernel): the same
  // bytes, twice in a row (each (row, KV head) counter is back at zero after a launch).
  if (c.kernel == kDecode && c.n_splits > 1) {
    const std::vector<float> by_reduce_kernel = out_dev.download();
    const std::vector<unsigned int> zeros(static_cast<size_t>(rows * c.n_head_kv), 0u);
    DeviceArray<unsigned int> counters(zeros);
    a.split_counters = counters.get();
    for (int launch = 0; launch < 2; ++launch) {
      out_dev.poison();
      out_q8.poison();
      out_half.poison();
      ASSERT_OK(attention(a, nullptr));
      ASSERT_CUDA(cudaDeviceSynchronize());
      const std::vector<float> combined = out_dev.download();
      EXPECT_EQ(
          std::memcmp(combined.data(), by_reduce_kernel.data(), combined.size() * sizeof(float)), 0)
          << "split counters, launch " << launch;
      EXPECT_EQ(counters.download(), zeros) << "launch " << launch;
      EXPECT_EQ(count_q8_mismatches(combined, out_stride, rows, q_dim, out_q8, a.out_q), 0)
          << "8-bit output, split counters";
      EXPECT_EQ(count_half_mismatches(combined, out_stride, rows, q_dim, out_half.download(),
                                      half_stride, half_type),
                0)
          << "half output, split counters";
    }
    a.split_counters = nullptr;
  }

  // The cache after write_kv: history plus the batch's rows at their slots.
  auto slot = [&](int seq, int pos) {
    return (static_cast<size_t>(tables[seq * blocks_per_seq + pos / block_size]) * block_size +
            pos % block_size) *
           kv_dim;
  };
  for (int64_t r = 0; r < rows; ++r) {
    const size_t base = slot(seq_index[r], positions[r]);
    k_cache.store(base, k_new.data() + r * kv_dim, kv_dim);
    v_cache.store(base, v_new.data() + r * kv_dim, kv_dim);
  }
  k_dev.expect_equal(k_cache, "write_kv: K");
  v_dev.expect_equal(v_cache, "write_kv: V");

  // Tolerance. The CUDA-core kernel computes in fp32: 2e-4 absolute. The tensor-core kernel
  // rounds Q (scaled) and the probabilities P to f16 (unit roundoff u = 2^-11 = 4.9e-4), and its
  // error scales with the V values it averages, so its bound is relative to
  // m = sum_t p_t |v_t| / sum_t p_t, the probability-weighted mean |v| of the output element:
  //   - P in f16: every p_t is off by at most u relative, which moves the output by <= u m;
  //   - Q in f16: score t is off by d_t, |d_t| <= u * scale * sum_d |q_d k_td|, which moves the
  //     output by sum_t p_t (d_t - mean d) v_t / sum_t p_t, at most 2 max|d_t| m. For these
  //     standard-normal inputs the roundings are independent and d_t stays near
  //     u * scale * sqrt(head_dim / 3) (about 3e-4), far from its worst case.
  // (The Q8_0 decode kernel also rounds each K value, code times scale, to f16: a second
  // error of the size of Q's in d_t, and the probabilities times the V scales: still one
  // rounding of each weight.)
  // A CPU emulation of the kernel's arithmetic (f16 Q and P, fp32 sums, chunks of 64 positions)
  // on such data over contexts of 1 to 1000 positions stays below 7.6e-4 m. 4e-3 m leaves a
  // factor of 5, and still fails a position wrongly masked or unmasked within the first hundred,
  // which moves the output by about m / (position + 1) >= 1e-2 m.
  constexpr double kTensorCoreRelTolerance = 4e-3;
  const std::vector<float> out = out_dev.download();
  int failures = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t e = q_dim; e < out_stride; ++e) {
      if (!std::isnan(out[r * out_stride + e]) && ++failures <= 5) {
        ADD_FAILURE() << "row " << r << ": column " << e << " past the heads was written";
      }
    }
    for (int h = 0; h < c.n_head; ++h) {
      const int kvh = h / group;
      const int ctx = positions[r] + 1;
      std::vector<double> p(ctx);
      double max_score = -INFINITY;
      for (int t = 0; t < ctx; ++t) {
        const size_t base = slot(seq_index[r], t) + static_cast<size_t>(kvh) * c.head_dim;
        double dot = 0.0;
        for (int d = 0; d < c.head_dim; ++d) {
          dot +=
              static_cast<double>(q[r * q_stride + h * c.head_dim + d]) * k_cache.value(base + d);
        }
        p[t] = dot * scale;
        max_score = std::max(max_score, p[t]);
      }
      double sum = 0.0;
      for (double& v : p) sum += (v = std::exp(v - max_score));
      for (int d = 0; d < c.head_dim; ++d) {
        double expected = 0.0, weighted_abs = 0.0;
        for (int t = 0; t < ctx; ++t) {
          const size_t base = slot(seq_index[r], t) + static_cast<size_t>(kvh) * c.head_dim;
          const double v = v_cache.value(base + d);
          expected += p[t] * v;
          weighted_abs += p[t] * std::fabs(v);
        }
        expected /= sum;
        const double tolerance =
            relative_tolerance[r] ? kTensorCoreRelTolerance * (weighted_abs / sum) : 2e-4;
        const float got = out[r * out_stride + h * c.head_dim + d];
        if (!(std::fabs(got - expected) <= tolerance) && ++failures <= 5) {
          ADD_FAILURE() << "row " << r << " (pos " << positions[r] << ") head " << h << " dim " << d
                        << ": got " << got << ", expected " << expected;
        }
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

INSTANTIATE_TEST_SUITE_P(Cases, AttentionTest, ::testing::ValuesIn(attention_cases()),
                         [](const ::testing::TestParamInfo<AttentionCase>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace llamaserve::cuda::testing
