// CUDA kernels against CPU references: RMSNorm, RoPE, elementwise ops and sampling (attention
// is in attention_test.cc).
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "backend/cpu/ref_kernels.h"
#include "backend/cpu/rope.h"
#include "backend/cuda/act_quant.h"
#include "backend/cuda/attention.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/norm.h"
#include "backend/cuda/rope.h"
#include "backend/cuda/sampling.h"
#include "quant/blocks.h"
#include "test_util.h"

namespace llamaserve::cuda::testing {
namespace {

void expect_all_near(const std::vector<float>& got, const std::vector<float>& expected, double rel,
                     double abs_tol, const char* what) {
  ASSERT_EQ(got.size(), expected.size());
  int failures = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = abs_tol + rel * std::fabs(expected[i]);
    if (!(std::fabs(got[i] - expected[i]) <= tol) && ++failures <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", expected " << expected[i];
    }
  }
  EXPECT_EQ(failures, 0) << what;
}

// Rows of halves (row stride h_stride) against fp32 rows (f_stride) converted on the host to
// `type`: bit for bit.
void expect_halves_of(const std::vector<uint16_t>& got, int64_t h_stride,
                      const std::vector<float>& f, int64_t f_stride, int64_t rows, int64_t n,
                      HalfType type) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      const float v = f[r * f_stride + c];
      const uint16_t want = type == HalfType::kF16 ? float_to_half(v).bits : float_to_bf16(v).bits;
      ASSERT_EQ(got[r * h_stride + c], want) << r << " " << c;
    }
  }
}

// ---------------------------------------------------------------------------------------
// RMSNorm

class RmsNormTest : public GpuTest {};

// Row width, row count, the input rows' padding and the half rows' padding (the residual
// halves get 4 more): rows of whole aligned 4-element groups without a residual take the sliced
// kernel below 16 rows and its wide slices from 16 to 64 rows (both widths of what a thread
// sums, partial slices and groups); more rows, or 16 and more with a residual, the many-rows
// kernel in each of its block sizes; the rest (odd widths or strides, fewer rows with a
// residual) the one-row kernel.
struct NormCase {
  int64_t n, rows, pad, half_pad;
};

class RmsNormRowsTest : public GpuTest, public ::testing::WithParamInterface<NormCase> {};

TEST_P(RmsNormRowsTest, PlainResidualAndGatheredRows) {
  const NormCase nc = GetParam();
  const int64_t n = nc.n, rows = nc.rows, stride = n + nc.pad;
  const std::vector<float> x = random_floats(rows * stride, 1, 3.0f);
  const std::vector<float> residual = random_floats(rows * n, 2);
  const std::vector<float> weight = random_floats(n, 3);
  const float eps = 1e-5f;
  DeviceArray<float> x_dev(x), residual_dev(residual), weight_dev(weight), y_dev(rows * n);

  // Plain.
  y_dev.poison();
  RmsNormArgs a;
  a.x = x_dev.get();
  a.x_stride = stride;
  a.weight = weight_dev.get();
  a.y = y_dev.get();
  a.y_stride = n;
  a.n_rows = rows;
  a.n = n;
  a.eps = eps;
  ASSERT_OK(rmsnorm(a, nullptr));
  std::vector<float> expected(rows * n);
  for (int64_t r = 0; r < rows; ++r)
    cpu::ref::rmsnorm(&x[r * stride], weight.data(), &expected[r * n], n, eps);
  expect_all_near(y_dev.download(), expected, 1e-5, 1e-6, "rmsnorm");

  // Gathered rows: every row, last first.
  std::vector<int32_t> ids(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    ids[static_cast<size_t>(r)] = static_cast<int32_t>(rows - 1 - r);
  DeviceArray<int32_t> ids_dev(ids);
  DeviceArray<float> g_dev(ids.size() * n);
  g_dev.poison();
  a.row_ids = ids_dev.get();
  a.y = g_dev.get();
  a.n_rows = static_cast<int64_t>(ids.size());
  ASSERT_OK(rmsnorm(a, nullptr));
  std::vector<float> expected_g(ids.size() * n);
  for (size_t i = 0; i < ids.size(); ++i) {
    std::copy_n(&expected[ids[i] * n], n, &expected_g[i * n]);
  }
  expect_all_near(g_dev.download(), expected_g, 1e-5, 1e-6, "rmsnorm gathered");

  // Residual: x += residual, y = norm(x).
  y_dev.poison();
  a.row_ids = nullptr;
  a.y = y_dev.get();
  a.n_rows = rows;
  a.residual = residual_dev.get();
  a.residual_stride = n;
  ASSERT_OK(rmsnorm(a, nullptr));
  std::vector<float> sum(rows * stride);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < stride; ++c) {
      sum[r * stride + c] = c < n ? x[r * stride + c] + residual[r * n + c] : x[r * stride + c];
    }
    cpu::ref::rmsnorm(&sum[r * stride], weight.data(), &expected[r * n], n, eps);
  }
  expect_all_near(y_dev.download(), expected, 1e-5, 1e-6, "add + rmsnorm");
  expect_all_near(x_dev.download(), sum, 0.0, 0.0, "residual sum");

  // The normalized rows as a GEMM's halves instead of y: the fp32 outputs of the same rows
  // (x already summed, no residual: the kernel the halves take), converted.
  for (const HalfType type : {HalfType::kF16, HalfType::kBF16}) {
    DeviceArray<float> x_again(x_dev.download());
    RmsNormArgs h = a;
    h.x = x_again.get();
    h.residual = nullptr;
    y_dev.poison();
    ASSERT_OK(rmsnorm(h, nullptr));
    const std::vector<float> f = y_dev.download();
    expect_all_near(f, expected, 1e-5, 1e-6, "rmsnorm of the sums");
    const int64_t h_stride = n + nc.half_pad;
    DeviceArray<uint16_t> half_dev(rows * h_stride);
    half_dev.poison();
    h.y = nullptr;
    h.y_half = HalfRows{half_dev.get(), h_stride, type};
    ASSERT_OK(rmsnorm(h, nullptr));
    ASSERT_NO_FATAL_FAILURE(expect_halves_of(half_dev.download(), h_stride, f, n, rows, n, type));
  }

  // Residual rows of halves (a tensor-parallel sum), f16 then bf16, at an odd stride; and the
  // same sums by add_half.
  for (const bool bf16 : {false, true}) {
    const int64_t h_stride = n + nc.half_pad + 4;
    std::vector<uint16_t> halves(rows * h_stride);
    std::vector<float> before = sum;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < n; ++c) {
        const float v = residual[r * n + c] * 7.0f;
        halves[r * h_stride + c] = bf16 ? float_to_bf16(v).bits : float_to_half(v).bits;
        const float back = bf16 ? bf16_to_float(BF16{halves[r * h_stride + c]})
                                : half_to_float(Half{halves[r * h_stride + c]});
        sum[r * stride + c] = before[r * stride + c] + back;
      }
      cpu::ref::rmsnorm(&sum[r * stride], weight.data(), &expected[r * n], n, eps);
    }
    DeviceArray<uint16_t> halves_dev(halves);
    DeviceArray<float> x2_dev(before);
    y_dev.poison();
    a.x = x2_dev.get();
    a.residual = nullptr;
    a.half_residual = halves_dev.get();
    a.half_residual_bf16 = bf16;
    a.residual_stride = h_stride;
    ASSERT_OK(rmsnorm(a, nullptr));
    expect_all_near(y_dev.download(), expected, 1e-5, 1e-6, "half residual + rmsnorm");
    expect_all_near(x2_dev.download(), sum, 0.0, 0.0, "half residual sum");

    DeviceArray<float> x3_dev(before);
    ASSERT_OK(add_half(x3_dev.get(), stride, halves_dev.get(), h_stride,
                       bf16 ? HalfType::kBF16 : HalfType::kF16, rows, n, nullptr));
    expect_all_near(x3_dev.download(), sum, 0.0, 0.0, "add_half");
  }
  a.residual = residual_dev.get();
  EXPECT_FALSE(rmsnorm(a, nullptr).is_ok());  // two residuals
}

INSTANTIATE_TEST_SUITE_P(Shapes, RmsNormRowsTest,
                         ::testing::Values(NormCase{5125, 7, 3, 1},   // one-row kernel
                                           NormCase{4096, 37, 4, 4},  // wide slices
                                           NormCase{2052, 16, 0, 0},  // wide, partial slice
                                           NormCase{4100, 21, 8, 8},  // wide, 8 groups
                                           NormCase{4096, 65, 4, 4},  // 128 threads per row
                                           NormCase{2052, 66, 0, 0},  // 128, a row half held
                                           NormCase{4100, 70, 8, 8},  // 256
                                           NormCase{8196, 17, 4, 4},  // 512
                                           NormCase{4096, 40, 2, 4},  // unaligned: one-row
                                           NormCase{4096, 15, 4, 4},  // too few: sliced
                                           NormCase{576, 1, 0, 0},    // sliced, one row
                                           NormCase{100, 5, 4, 2},    // sliced, part of a slice
                                           NormCase{8192, 3, 4, 4},   // sliced, 8 groups
                                           NormCase{6148, 2, 8, 0}    // sliced, partial groups
                                           ));

// ---------------------------------------------------------------------------------------
// RoPE

struct RopeCase {
  RopeOrdering ordering;
  RopeScalingType scaling;
  int64_t rope_dim;
};

class RopeTest : public GpuTest, public ::testing::WithParamInterface<RopeCase> {};

TEST_P(RopeTest, MatchesCpuRope) {
  const RopeCase c = GetParam();
  ModelConfig config;
  config.n_head = 6;
  config.n_head_kv = 2;
  config.head_dim = 64;
  config.rope_dim = c.rope_dim;
  config.rope_theta = 500000.0f;
  config.rope_ordering = c.ordering;
  config.rope_scaling.type = c.scaling;
  config.rope_scaling.factor = 8.0f;
  config.rope_scaling.original_context_length = 8192;
  const std::vector<float> inv_freq = cpu::rope_inv_freq(config, nullptr);
  const std::vector<int32_t> positions = {0, 1, 17, 4095, 100000, 131071};
  const int64_t rows = static_cast<int64_t>(positions.size());
  const int64_t q_stride = config.n_head * config.head_dim + 4;
  const int64_t k_stride = config.n_head_kv * config.head_dim;
  std::vector<float> q = random_floats(rows * q_stride, 11);
  std::vector<float> k = random_floats(rows * k_stride, 12);
  DeviceArray<float> q_dev(q), k_dev(k), freq_dev(inv_freq);
  DeviceArray<int32_t> pos_dev(positions);
  RopeArgs a;
  a.q = q_dev.get();
  a.q_stride = q_stride;
  a.k = k_dev.get();
  a.k_stride = k_stride;
  a.positions = pos_dev.get();
  a.inv_freq = freq_dev.get();
  a.n_rows = rows;
  a.n_head = 6;
  a.n_head_kv = 2;
  a.head_dim = 64;
  a.rope_dim = static_cast<int32_t>(c.rope_dim);
  a.ordering = c.ordering;
  ASSERT_OK(rope(a, nullptr));
  const int64_t n_pairs = c.rope_dim / 2;
  std::vector<float> cos(rows * n_pairs), sin(rows * n_pairs);
  cpu::rope_cos_sin(inv_freq, positions.data(), rows, cos.data(), sin.data());
  for (int64_t r = 0; r < rows; ++r) {
    cpu::rope_apply(&q[r * q_stride], 6, 64, c.rope_dim, c.ordering, &cos[r * n_pairs],
                    &sin[r * n_pairs]);
    cpu::rope_apply(&k[r * k_stride], 2, 64, c.rope_dim, c.ordering, &cos[r * n_pairs],
                    &sin[r * n_pairs]);
  }
  expect_all_near(q_dev.download(), q, 1e-5, 1e-6, "q");
  expect_all_near(k_dev.download(), k, 1e-5, 1e-6, "k");

  // rope_write_kv: the same Q and K, and K and V in the cache as write_kv leaves them.
  const std::vector<float> v = random_floats(rows * k_stride, 13);
  const std::vector<int32_t> seq_index = {0, 0, 1, 1, 1, 0};
  const int32_t block_size = 4, blocks_per_seq = 131072 / block_size + 1;
  // Every row in its own block (sequence 0: positions 0, 1, 131071; 1: 17, 4095, 100000).
  std::vector<int32_t> tables(2 * blocks_per_seq, 6);
  tables[0] = 0;
  tables[131071 / block_size] = 1;
  tables[blocks_per_seq + 17 / block_size] = 2;
  tables[blocks_per_seq + 4095 / block_size] = 3;
  tables[blocks_per_seq + 100000 / block_size] = 4;
  DeviceArray<float> q2(random_floats(rows * q_stride, 11)), k2(random_floats(rows * k_stride, 12));
  DeviceArray<float> v_dev(v);
  DeviceArray<int32_t> seq_dev(seq_index), table_dev(tables);
  DeviceArray<uint16_t> k_two(7 * block_size * k_stride), v_two(7 * block_size * k_stride);
  DeviceArray<uint16_t> k_one(7 * block_size * k_stride), v_one(7 * block_size * k_stride);
  for (auto* cache : {&k_two, &v_two, &k_one, &v_one}) cache->poison();
  KvWriteArgs w;
  w.k = k2.get();
  w.k_stride = k_stride;
  w.v = v_dev.get();
  w.v_stride = k_stride;
  w.positions = pos_dev.get();
  w.seq_index = seq_dev.get();
  w.block_tables = table_dev.get();
  w.blocks_per_seq = blocks_per_seq;
  w.block_size = block_size;
  w.n_rows = rows;
  w.kv_dim = k_stride;
  a.q = q2.get();
  a.k = k2.get();
  ASSERT_OK(rope(a, nullptr));
  w.k_cache = k_two.get();
  w.v_cache = v_two.get();
  ASSERT_OK(write_kv(w, nullptr));
  const std::vector<float> q_two = q2.download(), k_two_rows = k2.download();
  q2.upload(random_floats(rows * q_stride, 11));
  k2.upload(random_floats(rows * k_stride, 12));
  w.k_cache = k_one.get();
  w.v_cache = v_one.get();
  ASSERT_OK(rope_write_kv(a, w, nullptr));
  EXPECT_EQ(q2.download(), q_two);
  EXPECT_EQ(k2.download(), k_two_rows);
  EXPECT_EQ(k_one.download(), k_two.download());
  EXPECT_EQ(v_one.download(), v_two.download());

  // With a Q8_0 cache: codes and scales as write_kv quantizes them (attention_test checks those
  // against the host's encoder), heads whose 32-value blocks span rotated and unrotated dims
  // (rope_dim 32) included.
  const size_t cache_values = 7 * block_size * k_stride;
  DeviceArray<int8_t> k_codes_two(cache_values), v_codes_two(cache_values),
      k_codes_one(cache_values), v_codes_one(cache_values);
  DeviceArray<uint16_t> k_scales_two(cache_values / 32), v_scales_two(cache_values / 32),
      k_scales_one(cache_values / 32), v_scales_one(cache_values / 32);
  for (auto* cache : {&k_codes_two, &v_codes_two, &k_codes_one, &v_codes_one}) cache->poison();
  for (auto* cache : {&k_scales_two, &v_scales_two, &k_scales_one, &v_scales_one}) cache->poison();
  w.type = KvType::kQ8_0;
  q2.upload(random_floats(rows * q_stride, 11));
  k2.upload(random_floats(rows * k_stride, 12));
  ASSERT_OK(rope(a, nullptr));
  w.k_cache = k_codes_two.get();
  w.v_cache = v_codes_two.get();
  w.k_scales = k_scales_two.get();
  w.v_scales = v_scales_two.get();
  ASSERT_OK(write_kv(w, nullptr));
  q2.upload(random_floats(rows * q_stride, 11));
  k2.upload(random_floats(rows * k_stride, 12));
  w.k_cache = k_codes_one.get();
  w.v_cache = v_codes_one.get();
  w.k_scales = k_scales_one.get();
  w.v_scales = v_scales_one.get();
  ASSERT_OK(rope_write_kv(a, w, nullptr));
  EXPECT_EQ(q2.download(), q_two);
  EXPECT_EQ(k2.download(), k_two_rows);
  EXPECT_EQ(k_codes_one.download(), k_codes_two.download());
  EXPECT_EQ(v_codes_one.download(), v_codes_two.download());
  EXPECT_EQ(k_scales_one.download(), k_scales_two.download());
  EXPECT_EQ(v_scales_one.download(), v_scales_two.download());
}

INSTANTIATE_TEST_SUITE_P(
    Orderings, RopeTest,
    ::testing::Values(RopeCase{RopeOrdering::kNormal, RopeScalingType::kNone, 64},
                      RopeCase{RopeOrdering::kNeox, RopeScalingType::kNone, 64},
                      RopeCase{RopeOrdering::kNormal, RopeScalingType::kLinear, 64},
                      RopeCase{RopeOrdering::kNeox, RopeScalingType::kLlama3, 64},
                      RopeCase{RopeOrdering::kNeox, RopeScalingType::kNone, 32},
                      RopeCase{RopeOrdering::kNormal, RopeScalingType::kLlama3, 32}));

// The producers of matvec inputs write 8-bit blocks along with their float rows: the same floats
// as without, and blocks equal byte for byte to the host quantization of those floats (as the
// standalone quantize kernel's are). Rows past 65535 fold onto the grid's y dimension.
TEST_F(RmsNormTest, ProducersWrite8BitBlocks) {
  const int64_t n = 2048 + 96, rows = 3, stride = n + 8;
  const std::vector<float> x = random_floats(rows * stride, 11, 3.0f);
  const std::vector<float> weight = random_floats(n, 12);
  DeviceArray<float> x_dev(x), weight_dev(weight), y_plain(rows * n), y_dev(rows * n);
  DeviceArray<uint8_t> q8(q8_rows_bytes(rows, n));
  q8.poison();
  RmsNormArgs a;
  a.x = x_dev.get();
  a.x_stride = stride;
  a.weight = weight_dev.get();
  a.y = y_plain.get();
  a.y_stride = n;
  a.n_rows = rows;
  a.n = n;
  ASSERT_OK(rmsnorm(a, nullptr));
  a.y = y_dev.get();
  a.yq = q8_rows_view(q8.get(), rows, n);
  ASSERT_OK(rmsnorm(a, nullptr));
  const std::vector<float> y = y_dev.download();
  EXPECT_EQ(y, y_plain.download());
  EXPECT_EQ(count_q8_mismatches(y, n, rows, n, q8, a.yq), 0) << "rmsnorm";
  // With a residual added first (the one-row kernel; the above took the sliced one).
  const std::vector<float> residual = random_floats(rows * n, 16);
  DeviceArray<float> residual_dev(residual), x_again(x);
  a.x = x_again.get();
  a.residual = residual_dev.get();
  a.residual_stride = n;
  q8.poison();
  ASSERT_OK(rmsnorm(a, nullptr));
  const std::vector<float> y_added = y_dev.download();
  EXPECT_EQ(count_q8_mismatches(y_added, n, rows, n, q8, a.yq), 0) << "rmsnorm + residual";
  a.x = x_dev.get();
  a.residual = nullptr;

  const std::vector<float> gate = random_floats(rows * n, 13, 4.0f),
                           up = random_floats(rows * n, 14);
  DeviceArray<float> gate_dev(gate), up_dev(up), out_plain(rows * n), out_dev(rows * n);
  q8.poison();
  ASSERT_OK(silu_mul(gate_dev.get(), n, up_dev.get(), n, rows, n, out_plain.get(), n, nullptr));
  ASSERT_OK(silu_mul(gate_dev.get(), n, up_dev.get(), n, rows, n, out_dev.get(), n, nullptr, a.yq));
  const std::vector<float> out = out_dev.download();
  EXPECT_EQ(out, out_plain.download());
  EXPECT_EQ(count_q8_mismatches(out, n, rows, n, q8, a.yq), 0) << "silu_mul";

  const int64_t many = 70000, width = 64;
  const std::vector<float> big = random_floats(many * width, 15);
  DeviceArray<float> big_dev(big);
  DeviceArray<uint8_t> big_q8(q8_rows_bytes(many, width));
  big_q8.poison();
  const Q8Rows big_view = q8_rows_view(big_q8.get(), many, width);
  ASSERT_OK(quantize_q8(big_dev.get(), width, many, width, big_view, nullptr));
  EXPECT_EQ(count_q8_mismatches(big, width, many, width, big_q8, big_view), 0) << "quantize_q8";
  // Widths that are not whole blocks are refused.
  EXPECT_FALSE(quantize_q8(big_dev.get(), width, 1, 40, big_view, nullptr).is_ok());
}

// ---------------------------------------------------------------------------------------
// Elementwise

class ElementwiseTest : public GpuTest {};

TEST_F(ElementwiseTest, SiluMulAddBiasGatherConvert) {
  const int64_t rows = 5, n = 1537;
  const std::vector<float> gate = random_floats(rows * n, 21, 4.0f);
  const std::vector<float> up = random_floats(rows * n, 22);
  DeviceArray<float> gate_dev(gate), up_dev(up), out_dev(rows * n);
  out_dev.poison();
  ASSERT_OK(silu_mul(gate_dev.get(), n, up_dev.get(), n, rows, n, out_dev.get(), n, nullptr));
  std::vector<float> expected(rows * n);
  cpu::ref::silu_mul(gate.data(), up.data(), expected.data(), rows * n);
  expect_all_near(out_dev.download(), expected, 2e-6, 1e-7, "silu_mul");
  // The same rows written as a GEMM's halves (odd stride): the fp32 values, converted.
  {
    const std::vector<float> f = out_dev.download();
    const int64_t h_stride = n + 3;
    DeviceArray<uint16_t> half_dev(rows * h_stride);
    for (const HalfType type : {HalfType::kF16, HalfType::kBF16}) {
      half_dev.poison();
      ASSERT_OK(silu_mul(gate_dev.get(), n, up_dev.get(), n, rows, n, nullptr, n, nullptr, {},
                         HalfRows{half_dev.get(), h_stride, type}));
      ASSERT_NO_FATAL_FAILURE(expect_halves_of(half_dev.download(), h_stride, f, n, rows, n, type));
    }
  }

  // Rows whose widths and strides allow four elements per thread: the same bits.
  {
    const int64_t n4 = 1024, in_stride = 1028, h_stride = 1032;
    const std::vector<float> g4 = random_floats(rows * in_stride, 25, 4.0f);
    const std::vector<float> u4 = random_floats(rows * in_stride, 26);
    DeviceArray<float> g4_dev(g4), u4_dev(u4), f4_dev(rows * n4);
    ASSERT_OK(silu_mul(g4_dev.get(), in_stride, u4_dev.get(), in_stride, rows, n4, f4_dev.get(), n4,
                       nullptr));
    const std::vector<float> f = f4_dev.download();
    DeviceArray<uint16_t> half_dev(rows * h_stride);
    for (const HalfType type : {HalfType::kF16, HalfType::kBF16}) {
      half_dev.poison();
      ASSERT_OK(silu_mul(g4_dev.get(), in_stride, u4_dev.get(), in_stride, rows, n4, nullptr, n4,
                         nullptr, {}, HalfRows{half_dev.get(), h_stride, type}));
      ASSERT_NO_FATAL_FAILURE(
          expect_halves_of(half_dev.download(), h_stride, f, n4, rows, n4, type));
      half_dev.poison();
      ASSERT_OK(convert_to_half(g4_dev.get(), in_stride, rows, n4, half_dev.get(), h_stride, type,
                                nullptr));
      ASSERT_NO_FATAL_FAILURE(
          expect_halves_of(half_dev.download(), h_stride, g4, in_stride, rows, n4, type));
    }
  }

  ASSERT_OK(add_inplace(gate_dev.get(), n, up_dev.get(), n, rows, n, nullptr));
  for (int64_t i = 0; i < rows * n; ++i) expected[i] = gate[i] + up[i];
  expect_all_near(gate_dev.download(), expected, 0.0, 0.0, "add_inplace");

  const std::vector<float> bias = random_floats(n, 23);
  DeviceArray<float> bias_dev(bias);
  ASSERT_OK(add_bias(up_dev.get(), n, bias_dev.get(), rows, n, nullptr));
  for (int64_t i = 0; i < rows * n; ++i) expected[i] = up[i] + bias[i % n];
  expect_all_near(up_dev.download(), expected, 0.0, 0.0, "add_bias");

  const std::vector<int32_t> ids = {4, 4, 0, 2};
  DeviceArray<int32_t> ids_dev(ids);
  DeviceArray<float> gathered(ids.size() * (n + 1));
  gathered.poison();
  ASSERT_OK(gather_rows(up_dev.get(), n, ids_dev.get(), static_cast<int64_t>(ids.size()), n,
                        gathered.get(), n + 1, nullptr));
  const std::vector<float> g = gathered.download();
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int64_t c = 0; c < n; ++c) ASSERT_EQ(g[i * (n + 1) + c], expected[ids[i] * n + c]);
  }

  std::vector<float> wide = random_floats(rows * n, 24, 100.0f);
  wide[3] = 1e6f;  // saturates to the largest half
  wide[4] = -1e6f;
  DeviceArray<float> wide_dev(wide);
  DeviceArray<uint16_t> half_dev(rows * n);
  ASSERT_OK(
      convert_to_half(wide_dev.get(), n, rows, n, half_dev.get(), n, HalfType::kF16, nullptr));
  const std::vector<uint16_t> h = half_dev.download();
  for (int64_t i = 0; i < rows * n; ++i) {
    const float clamped = std::min(std::max(wide[i], -65504.0f), 65504.0f);
    ASSERT_EQ(h[i], float_to_half(clamped).bits) << i;
  }
  ASSERT_OK(
      convert_to_half(wide_dev.get(), n, rows, n, half_dev.get(), n, HalfType::kBF16, nullptr));
  const std::vector<uint16_t> b = half_dev.download();
  for (int64_t i = 0; i < rows * n; ++i) ASSERT_EQ(b[i], float_to_bf16(wide[i]).bits) << i;
}

// ---------------------------------------------------------------------------------------
// Sampling

class SamplingTest : public GpuTest {};

TEST(Philox, KnownAnswer) {
  // Random123's known-answer vector for philox4x32-10 with zero counter and key: first word
  // 0x6627e8d5; the uniform takes its top 24 bits.
  EXPECT_EQ(philox_uniform(0, 0), static_cast<float>(0x6627e8d5u >> 8) / 16777216.0f);
}

TEST_F(SamplingTest, GreedyIsArgmaxWithLowestIndexOnTies) {
  const int64_t vocab = 50001, rows = 4;
  std::vector<float> logits = random_floats(rows * vocab, 41);
  logits[0 * vocab + 777] = 50.0f;
  logits[1 * vocab + 50000] = 50.0f;
  logits[2 * vocab + 10] = 50.0f;  // tie: the lower index wins
  logits[2 * vocab + 20] = 50.0f;
  std::vector<SamplingParams> params(rows);
  params[3].temperature = 1.0f;  // top_k = 1 also means argmax
  params[3].top_k = 1;
  logits[3 * vocab + 4242] = 50.0f;
  DeviceArray<float> logits_dev(logits);
  DeviceArray<SamplingParams> params_dev(params);
  DeviceArray<int32_t> tokens(rows);
  tokens.poison();
  ASSERT_OK(
      sample_tokens(logits_dev.get(), vocab, rows, vocab, params_dev.get(), tokens.get(), nullptr));
  EXPECT_EQ(tokens.download(), (std::vector<int32_t>{777, 50000, 10, 4242}));
}

TEST_F(SamplingTest, TopKTopPDistributionAndDeterminism) {
  const int64_t vocab = 50, draws = 20000;
  const std::vector<float> base = random_floats(vocab, 42, 2.0f);
  const float temperature = 0.7f, top_p = 0.8f;
  const int top_k = 10;
  std::vector<float> logits(draws * vocab);
  std::vector<SamplingParams> params(draws);
  for (int64_t i = 0; i < draws; ++i) {
    std::copy(base.begin(), base.end(), logits.begin() + i * vocab);
    params[i] = SamplingParams{temperature, top_k, top_p, 1234567, static_cast<uint64_t>(i)};
  }
  DeviceArray<float> logits_dev(logits);
  DeviceArray<SamplingParams> params_dev(params);
  DeviceArray<int32_t> tokens(draws);
  tokens.poison();
  ASSERT_OK(sample_tokens(logits_dev.get(), vocab, draws, vocab, params_dev.get(), tokens.get(),
                          nullptr));
  const std::vector<int32_t> first = tokens.download();
  ASSERT_OK(sample_tokens(logits_dev.get(), vocab, draws, vocab, params_dev.get(), tokens.get(),
                          nullptr));
  EXPECT_EQ(tokens.download(), first) << "same seed and offsets must draw the same tokens";

  // Reference: tempered softmax, top-k, then the smallest top-p prefix, renormalized.
  const float max_logit = *std::max_element(base.begin(), base.end());
  std::vector<std::pair<double, int>> sorted;
  for (int i = 0; i < vocab; ++i)
    sorted.push_back({std::exp((base[i] - max_logit) / temperature), i});
  std::sort(sorted.rbegin(), sorted.rend());
  sorted.resize(top_k);
  double mass_k = 0.0;
  for (auto& [p, i] : sorted) mass_k += p;
  double cumulative = 0.0;
  size_t keep = 0;
  while (keep < sorted.size() && cumulative < top_p * mass_k) cumulative += sorted[keep++].first;
  std::map<int, double> expected;
  for (size_t j = 0; j < keep; ++j) expected[sorted[j].second] = sorted[j].first / cumulative;

  std::map<int, int> counts;
  for (int32_t t : first) {
    ASSERT_TRUE(expected.count(t)) << "token " << t << " is outside the top-k/top-p set";
    ++counts[t];
  }
  for (auto [token, p] : expected) {
    const double mean = p * draws, sd = std::sqrt(draws * p * (1 - p));
    EXPECT_NEAR(counts[token], mean, 5 * sd + 1) << "token " << token << " probability " << p;
  }
}

TEST_F(SamplingTest, MasksAgainstTheHostReferenceOnOddSizes) {
  // Odd vocabularies (not a multiple of 64, one word short of a row's mask, a padded model
  // vocabulary longer than the mask) and rows with and without masks.
  for (const int64_t vocab : {1, 63, 65, 1001, 32003}) {
    const int64_t rows = 5, stride = vocab + 7;
    std::vector<float> logits = random_floats(rows * stride, 43 + vocab);
    std::vector<SamplingParams> params(rows);
    std::vector<std::vector<uint64_t>> masks(rows);
    std::mt19937 rng(static_cast<uint32_t>(vocab));
    for (int64_t r = 0; r < rows; ++r) {
      if (r == 1) continue;  // no mask: every token
      // Row 3's mask covers fewer tokens than the model's vocabulary.
      const int64_t covered = r == 3 ? std::max<int64_t>(1, vocab - 64) : vocab;
      masks[r].assign(static_cast<size_t>((covered + 63) / 64), 0);
      for (int64_t t = 0; t < covered; ++t) {
        if (rng() % 3 == 0 || t == covered - 1) masks[r][t / 64] |= uint64_t{1} << (t % 64);
      }
      params[r].allowed = masks[r].data();
      params[r].allowed_words = static_cast<int32_t>(masks[r].size());
    }
    MaskStaging staging;
    auto device_masks = staging.stage(params, vocab, nullptr);
    ASSERT_TRUE(device_masks.is_ok()) << device_masks.status().to_string();
    ASSERT_NE(*device_masks, nullptr);
    DeviceArray<float> logits_dev(logits);
    ASSERT_OK(mask_logits(logits_dev.get(), stride, rows, vocab, *device_masks, (vocab + 63) / 64,
                          nullptr));
    // Greedy draws after the mask: the host argmax over the allowed tokens.
    DeviceArray<SamplingParams> params_dev(params);
    DeviceArray<int32_t> tokens(rows);
    tokens.poison();
    ASSERT_OK(sample_tokens(logits_dev.get(), stride, rows, vocab, params_dev.get(), tokens.get(),
                            nullptr));
    const std::vector<float> masked = logits_dev.download();
    const std::vector<int32_t> drawn = tokens.download();
    for (int64_t r = 0; r < rows; ++r) {
      int32_t best = -1;
      for (int64_t t = 0; t < vocab; ++t) {
        const size_t word = static_cast<size_t>(t / 64);
        const bool allowed = params[r].allowed == nullptr ||
                             (word < masks[r].size() && ((masks[r][word] >> (t % 64)) & 1));
        const float got = masked[r * stride + t];
        if (allowed) {
          ASSERT_EQ(got, logits[r * stride + t]) << vocab << " row " << r << " token " << t;
          if (best < 0 || got > masked[r * stride + best]) best = static_cast<int32_t>(t);
        } else {
          ASSERT_EQ(got, -INFINITY) << vocab << " row " << r << " token " << t;
        }
      }
      EXPECT_EQ(drawn[r], best) << vocab << " row " << r;
    }
  }
  // No row with a mask: nothing staged.
  MaskStaging staging;
  std::vector<SamplingParams> free_rows(3);
  auto none = staging.stage(free_rows, 100, nullptr);
  ASSERT_TRUE(none.is_ok());
  EXPECT_EQ(*none, nullptr);
}

TEST_F(SamplingTest, RandomDrawsStayInsideTheMask) {
  const int64_t vocab = 1000, draws = 2000;
  const std::vector<float> base = random_floats(vocab, 44, 2.0f);
  std::vector<uint64_t> mask((vocab + 63) / 64, 0);
  for (int64_t t = 0; t < vocab; t += 7) mask[t / 64] |= uint64_t{1} << (t % 64);
  std::vector<float> logits(draws * vocab);
  std::vector<SamplingParams> params(draws);
  for (int64_t i = 0; i < draws; ++i) {
    std::copy(base.begin(), base.end(), logits.begin() + i * vocab);
    params[i] = SamplingParams{1.0f, 0, 0.95f, 99, static_cast<uint64_t>(i)};
    params[i].allowed = mask.data();
    params[i].allowed_words = static_cast<int32_t>(mask.size());
  }
  MaskStaging staging;
  auto device_masks = staging.stage(params, vocab, nullptr);
  ASSERT_TRUE(device_masks.is_ok());
  DeviceArray<float> logits_dev(logits);
  ASSERT_OK(
      mask_logits(logits_dev.get(), vocab, draws, vocab, *device_masks, mask.size(), nullptr));
  DeviceArray<SamplingParams> params_dev(params);
  DeviceArray<int32_t> tokens(draws);
  tokens.poison();
  ASSERT_OK(sample_tokens(logits_dev.get(), vocab, draws, vocab, params_dev.get(), tokens.get(),
                          nullptr));
  std::set<int32_t> distinct;
  for (int32_t t : tokens.download()) {
    ASSERT_EQ(t % 7, 0) << "token " << t << " is outside the mask";
    distinct.insert(t);
  }
  EXPECT_GT(distinct.size(), 5u);
}

}  // namespace
}  // namespace llamaserve::cuda::testing
