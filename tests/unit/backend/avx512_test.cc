// The AVX-512 kernels (dot_avx512.h) and the AMX ones (packed_weight.h) against the AVX2 ones
// and the reference kernels, on odd sizes, random and extreme data, and a whole forward pass
// with the kernels forced to AVX2 and to AVX-512 against auto. The AVX-512 and AMX kernels keep
// the AVX2 kernels' float operations and order, so these tests ask for the same bits, not for
// closeness: any difference is a bug.
//
// Everything that runs AVX-512 code skips on a CPU without AVX-512 VNNI (the message says
// so), and what runs AMX code on a CPU without AMX-INT8; run the suite on such a CPU to test
// those paths:
//   ctest --test-dir build/<dir> -R 'Avx512|CpuIsa' --output-on-failure
// Forcing avx2 is tested on every machine.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "act_rows.h"
#include "backend/cpu/act_quant.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/matmul.h"
#include "executor/cpu_executor.h"
#include "executor/executor_factory.h"
#include "model/importers/synth_memory.h"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace llamaserve::cpu {
namespace {

namespace fs = std::filesystem;

#define SKIP_WITHOUT_AVX512()                                                              \
  if (!cpu_has_avx512_vnni()) {                                                            \
    GTEST_SKIP() << "this CPU (or its OS) lacks AVX512F/BW/VL + AVX512-VNNI: the AVX-512 " \
                    "kernels cannot run here; run this test on an AVX-512 machine";        \
  }
#define SKIP_WITHOUT_AMX()                                                                      \
  if (!cpu_has_amx_int8()) {                                                                    \
    GTEST_SKIP() << "this CPU (or its OS) lacks AMX-TILE + AMX-INT8 (or AVX-512 VNNI): the "    \
                    "AMX kernels cannot run here; run this test on a Sapphire Rapids or newer"; \
  }

bool same_bits(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

const TensorType kWeightTypes[] = {TensorType::F32,  TensorType::F16,  TensorType::BF16,
                                   TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1,
                                   TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K};

// Row lengths that leave every tail of the kernels in play: for the float types the 32-wide
// loop, the 8-wide steps and the scalar rest; for the 32-element blocks odd block counts (the
// Q4 kernels take blocks in pairs); for the K-quants one to three super-blocks.
std::vector<int64_t> odd_lengths(TensorType type) {
  const uint32_t block = traits(type).block_elems;
  if (block == 1) return {1, 5, 8, 15, 16, 17, 31, 32, 33, 47, 64, 95, 333, 1000};
  if (block == 32) return {32, 64, 96, 160, 32 * 23};
  return {256, 512, 768};
}

std::vector<float> random_floats(size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// A finite half of magnitude 2^[-14, 3] and either sign.
Half random_half(std::mt19937& rng) {
  std::uniform_real_distribution<float> exponent(-14.0f, 3.0f);
  const float value = std::exp2(exponent(rng)) * (rng() % 2 ? 1.0f : -1.0f);
  return float_to_half(value);
}

// Where a block type keeps its float scales (byte offsets), so that random blocks can have
// random bytes everywhere else: every quant, sub-block scale and high-bit pattern, Q8_0's
// -128 and Q6_K's negative scales among them.
std::vector<size_t> half_offsets(TensorType type) {
  switch (type) {
    case TensorType::Q8_0: return {0};
    case TensorType::Q4_0: return {0};
    case TensorType::Q4_1: return {0, 2};
    case TensorType::Q4_K: return {0, 2};
    case TensorType::Q5_K: return {0, 2};
    case TensorType::Q6_K: return {offsetof(BlockQ6_K, d)};
    default: return {};
  }
}

// rows × cols weights of `type`. Quantized types: even rows are random floats quantized
// with row scales from 1e-3 to 1e3, odd rows random bytes with random finite half scales.
// Float types: random floats with row scales from 1e-3 to 1e3.
std::vector<uint8_t> make_weights(TensorType type, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  const size_t row_size = row_bytes(type, static_cast<size_t>(cols));
  std::vector<uint8_t> bytes(row_size * static_cast<size_t>(rows));
  const TypeTraits& t = traits(type);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = bytes.data() + static_cast<size_t>(r) * row_size;
    const float scale = std::pow(10.0f, static_cast<float>(r % 7) - 3.0f);
    if (t.block_elems == 1 || r % 2 == 0) {
      const std::vector<float> values = random_floats(static_cast<size_t>(cols), rng, scale);
      EXPECT_TRUE(quantize_row(type, values.data(), row, cols).is_ok());
      continue;
    }
    for (size_t i = 0; i < row_size; ++i) row[i] = static_cast<uint8_t>(rng());
    for (size_t block = 0; block < row_size / t.block_bytes; ++block) {
      for (size_t offset : half_offsets(type)) {
        const Half h = random_half(rng);
        std::memcpy(row + block * t.block_bytes + offset, &h, sizeof h);
      }
    }
  }
  return bytes;
}

// Five activation rows of n floats: scales from 1e-4 to 1e4, one all zero, one a single
// spike (every other element of its blocks rounds to zero).
std::vector<float> make_activations(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> x;
  for (float scale : {1e-4f, 1.0f, 0.0f, 1e4f, 3.0f}) {
    std::vector<float> row = random_floats(static_cast<size_t>(n), rng, scale == 0 ? 1 : scale);
    if (scale == 0.0f) std::fill(row.begin(), row.end(), 0.0f);
    x.insert(x.end(), row.begin(), row.end());
  }
  float* spike = x.data() + 4 * n;
  for (int64_t i = 0; i < n; ++i) spike[i] *= 1e-3f;
  spike[n / 2] = 50.0f;
  return x;
}

TEST(CpuIsa, Detection) {
  // Printed so that a log shows which kernels the other tests ran.
  std::printf("this CPU: AVX-512 VNNI %s, AMX-INT8 %s\n", cpu_has_avx512_vnni() ? "yes" : "no",
              cpu_has_amx_int8() ? "yes" : "no");
  const KernelIsa avx512 = cpu_has_avx512_vnni() ? KernelIsa::kAvx512Vnni : KernelIsa::kAvx2;
  EXPECT_EQ(resolve_kernel_isa(CpuIsa::kAvx2), KernelIsa::kAvx2);
  EXPECT_EQ(resolve_kernel_isa(CpuIsa::kAvx512), avx512);
  EXPECT_EQ(resolve_kernel_isa(CpuIsa::kAuto), cpu_has_amx_int8() ? KernelIsa::kAvx512Amx : avx512);
  EXPECT_TRUE(!cpu_has_amx_int8() || cpu_has_avx512_vnni());
  EXPECT_EQ(parse_cpu_isa("auto").value(), CpuIsa::kAuto);
  EXPECT_EQ(parse_cpu_isa("avx512").value(), CpuIsa::kAvx512);
  EXPECT_EQ(parse_cpu_isa("avx2").value(), CpuIsa::kAvx2);
  const auto bad = parse_cpu_isa("amx");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("expected auto, avx512 or avx2"), std::string::npos);
  EXPECT_STREQ(cpu_isa_name(CpuIsa::kAvx2), "avx2");
  EXPECT_STREQ(cpu_isa_name(CpuIsa::kAvx512), "avx512");
  EXPECT_STREQ(kernel_isa_name(KernelIsa::kAvx512Vnni), "avx512-vnni");
  EXPECT_STREQ(kernel_isa_name(KernelIsa::kAvx512Amx), "avx512-amx");
  EXPECT_FALSE(uses_avx512(KernelIsa::kAvx2));
  EXPECT_TRUE(uses_avx512(KernelIsa::kAvx512Vnni));
  EXPECT_TRUE(uses_avx512(KernelIsa::kAvx512Amx));
}

TEST(CpuIsa, TablesAgreeOnTypesAndFormats) {
  // Reading the AVX-512 table runs no AVX-512 code.
  for (TensorType type : kWeightTypes) {
    const MatmulKernel* avx2 = find_matmul_kernel(type, KernelIsa::kAvx2);
    const MatmulKernel* avx512 = find_matmul_kernel(type, KernelIsa::kAvx512Vnni);
    const MatmulKernel* amx = find_matmul_kernel(type, KernelIsa::kAvx512Amx);
    ASSERT_NE(avx2, nullptr);
    ASSERT_NE(avx512, nullptr);
    ASSERT_NE(amx, nullptr);
    EXPECT_EQ(avx2->act_format, avx512->act_format) << type_name(type);
    EXPECT_EQ(avx2->block_elems, avx512->block_elems) << type_name(type);
    // The AMX table is the AVX-512 one with the AMX pair kernels of the quantized types.
    EXPECT_EQ(amx->act_format, avx512->act_format) << type_name(type);
    EXPECT_EQ(amx->packed_tile, avx512->packed_tile) << type_name(type);
    EXPECT_EQ(amx->packed_tile_pair, avx512->packed_tile_pair) << type_name(type);
    const bool has_amx = PackedWeight::packs(type);
    EXPECT_EQ(amx->packed_tile_pair_amx != nullptr, has_amx) << type_name(type);
    if (has_amx) {
      // The K-quants' AMX kernels read the rows their other kernels read.
      EXPECT_EQ(amx->amx_act_format, avx512->act_format == ActFormat::kQ8_256
                                         ? ActFormat::kQ8_256
                                         : ActFormat::kQ8_32Planar)
          << type_name(type);
    }
    EXPECT_EQ(avx512->packed_tile_pair_amx, nullptr) << type_name(type);
    EXPECT_EQ(avx2->packed_tile_pair_amx, nullptr) << type_name(type);
    for (const MatmulKernel* kernel : {avx2, avx512}) {
      // Row kernels or a packed-tile kernel, as PackedWeight::packs says.
      const bool packed = PackedWeight::packs(type);
      EXPECT_EQ(kernel->packed_tile != nullptr, packed) << type_name(type);
      EXPECT_EQ(kernel->dot != nullptr, !packed) << type_name(type);
      EXPECT_EQ(kernel->dot_rows != nullptr, !packed) << type_name(type);
    }
    if (!PackedWeight::packs(type)) {
      EXPECT_NE(avx512->dot_rows4, nullptr) << type_name(type);
    }
  }
  EXPECT_EQ(find_matmul_kernel(TensorType::Q2_K, KernelIsa::kAvx512Vnni), nullptr);
}

class Avx512KernelTest : public ::testing::TestWithParam<TensorType> {};
class Avx512RowKernelTest : public ::testing::TestWithParam<TensorType> {};

// Each kernel entry (one row, rows of one token, rows of four tokens) of the types in the
// file's row layout against the AVX2 one-row kernel, bit for bit, and against the reference
// dot product of the activations the kernels were given. (The packed types: MatmulEqualsAvx2.)
TEST_P(Avx512RowKernelTest, RowKernelsEqualAvx2) {
  SKIP_WITHOUT_AVX512();
  const TensorType type = GetParam();
  const MatmulKernel* avx2 = find_matmul_kernel(type, KernelIsa::kAvx2);
  const MatmulKernel* avx512 = find_matmul_kernel(type, KernelIsa::kAvx512Vnni);
  constexpr int64_t kRows = 7;
  constexpr int kTokens = 5;
  for (const int64_t n : odd_lengths(type)) {
    SCOPED_TRACE(std::string(type_name(type)) + " n " + std::to_string(n));
    const std::vector<uint8_t> w = make_weights(type, kRows, n, static_cast<uint32_t>(n));
    const size_t w_stride = row_bytes(type, static_cast<size_t>(n));
    const std::vector<float> x = make_activations(n, static_cast<uint32_t>(n) + 1);
    const size_t act_stride = act_row_bytes(avx2->act_format, n);
    std::vector<uint8_t> act(act_stride * kTokens);
    for (int t = 0; t < kTokens; ++t) {
      quantize_act_row(avx2->act_format, x.data() + t * n, act.data() + t * act_stride, n);
    }
    float expected[kTokens][kRows];
    for (int t = 0; t < kTokens; ++t) {
      const uint8_t* act_row = act.data() + t * act_stride;
      const std::vector<float> seen = dequantize_act(avx2->act_format, act_row, n);
      for (int64_t r = 0; r < kRows; ++r) {
        const uint8_t* w_row = w.data() + r * w_stride;
        expected[t][r] = avx2->dot(w_row, act_row, n);
        const float got = avx512->dot(w_row, act_row, n);
        EXPECT_TRUE(same_bits(got, expected[t][r]))
            << "dot, token " << t << " row " << r << ": " << got << " vs " << expected[t][r];
        std::vector<float> wf(static_cast<size_t>(n));
        ASSERT_TRUE(dequantize_row(type, w_row, wf.data(), n).is_ok());
        double exact = 0.0, magnitude = 0.0;
        for (int64_t i = 0; i < n; ++i) {
          exact += static_cast<double>(wf[i]) * seen[i];
          magnitude += std::fabs(static_cast<double>(wf[i]) * seen[i]);
        }
        EXPECT_NEAR(got, exact, 1e-4 * magnitude + 1e-30) << "token " << t << " row " << r;
      }
      float rows_out[kRows];
      avx512->dot_rows(w.data(), w_stride, kRows, act_row, n, rows_out);
      for (int64_t r = 0; r < kRows; ++r) {
        EXPECT_TRUE(same_bits(rows_out[r], expected[t][r]))
            << "dot_rows, token " << t << " row " << r;
      }
    }
    // Tokens 0..3 and 1..4; the output rows strided as matmul writes them.
    for (int first = 0; first + 4 <= kTokens; ++first) {
      std::vector<float> y(4 * (kRows + 2), -1.0f);
      avx512->dot_rows4(w.data(), w_stride, kRows, act.data() + first * act_stride, act_stride, n,
                        y.data(), kRows + 2);
      for (int t = 0; t < 4; ++t) {
        for (int64_t r = 0; r < kRows; ++r) {
          EXPECT_TRUE(same_bits(y[t * (kRows + 2) + r], expected[first + t][r]))
              << "dot_rows4, token " << first + t << " row " << r;
        }
        EXPECT_EQ(y[t * (kRows + 2) + kRows], -1.0f) << "dot_rows4 wrote past its rows";
      }
    }
  }
}

// matmul over 1..5 tokens (four-token passes and the rest), two outputs sharing the input,
// odd row counts, a bias and three threads: the same bits with either table, the packed types
// packed.
TEST_P(Avx512KernelTest, MatmulEqualsAvx2) {
  SKIP_WITHOUT_AVX512();
  const TensorType type = GetParam();
  const int64_t cols = odd_lengths(type).back();
  const std::vector<uint8_t> wa = make_weights(type, 37, cols, 7);
  const std::vector<uint8_t> wb = make_weights(type, 11, cols, 8);
  auto tensor = [&](const std::vector<uint8_t>& bytes, int64_t rows) {
    QTensor t;
    t.name = "test";
    t.type = type;
    t.shape = {rows, cols};
    t.data = bytes.data();
    t.n_bytes = bytes.size();
    return t;
  };
  const QTensor a = tensor(wa, 37), b = tensor(wb, 11);
  std::mt19937 rng(9);
  const std::vector<float> bias = random_floats(11, rng, 1.0f);
  const std::vector<float> x = make_activations(cols, 10);
  ThreadPool pool(3);
  std::vector<PackedWeight> packed;  // the types multiplied packed (packed_weight.h)
  if (PackedWeight::packs(type)) {
    packed.push_back(PackedWeight::pack(a, pool).value());
    packed.push_back(PackedWeight::pack(b, pool).value());
  }
  const bool use_packed = !packed.empty();
  for (int64_t n_tokens = 1; n_tokens <= 5; ++n_tokens) {
    std::vector<float> y[2][2];  // [isa][output]
    for (int i = 0; i < 2; ++i) {
      ActCache act(8, cols);
      act.reset(x.data(), n_tokens, cols);
      y[i][0].assign(static_cast<size_t>(n_tokens * 37), 0.0f);
      y[i][1].assign(static_cast<size_t>(n_tokens * 11), 0.0f);
      const MatmulOutput outputs[] = {
          {&a, y[i][0].data(), 37, nullptr, use_packed ? &packed[0] : nullptr},
          {&b, y[i][1].data(), 11, bias.data(), use_packed ? &packed[1] : nullptr}};
      matmul(outputs, act, pool, i == 0 ? KernelIsa::kAvx2 : KernelIsa::kAvx512Vnni);
    }
    for (int o = 0; o < 2; ++o) {
      for (size_t k = 0; k < y[0][o].size(); ++k) {
        ASSERT_TRUE(same_bits(y[1][o][k], y[0][o][k]))
            << type_name(type) << (use_packed ? " packed" : "") << ", " << n_tokens
            << " tokens, output " << o << " element " << k << ": " << y[1][o][k] << " vs "
            << y[0][o][k];
      }
    }
  }
}

class AmxKernelTest : public ::testing::TestWithParam<TensorType> {};

// matmul over 16 to 40 tokens (AMX passes of sixteen, the rest through the AVX-512 pair kernel)
// on every odd row length, with 37 rows (pairs of tiles, then a lone and a partial tile), 64 rows
// and 11 with a bias (which take no pairs) sharing the input, and three threads (whose ranges cut
// the pairs in other places): the same bits with each table.
TEST_P(AmxKernelTest, MatmulEqualsAvx2) {
  SKIP_WITHOUT_AMX();
  const TensorType type = GetParam();
  constexpr int64_t kRows[] = {37, 64, 11};
  constexpr int64_t kMaxTokens = 40;
  ThreadPool pool(3);
  for (const int64_t cols : odd_lengths(type)) {
    std::vector<std::vector<uint8_t>> bytes;
    std::vector<QTensor> tensors;
    std::vector<PackedWeight> packed;
    for (size_t i = 0; i < std::size(kRows); ++i) {
      bytes.push_back(make_weights(type, kRows[i], cols, static_cast<uint32_t>(cols + i)));
    }
    for (size_t i = 0; i < std::size(kRows); ++i) {
      QTensor t;
      t.name = "test";
      t.type = type;
      t.shape = {kRows[i], cols};
      t.data = bytes[i].data();
      t.n_bytes = bytes[i].size();
      tensors.push_back(t);
    }
    for (const QTensor& t : tensors) packed.push_back(PackedWeight::pack(t, pool).value());
    std::mt19937 rng(static_cast<uint32_t>(cols));
    const std::vector<float> bias = random_floats(kRows[2], rng, 1.0f);
    std::vector<float> x = random_floats(kMaxTokens * cols, rng, 2.0f);
    for (int64_t i = 0; i < cols; ++i) x[5 * cols + i] *= 1e-3f;  // a row of small values
    for (const int64_t n_tokens : {16, 17, 31, 32, 40}) {
      std::vector<float> y[3][std::size(kRows)];  // [isa][output]
      const KernelIsa isas[] = {KernelIsa::kAvx2, KernelIsa::kAvx512Vnni, KernelIsa::kAvx512Amx};
      for (int i = 0; i < 3; ++i) {
        ActCache act(kMaxTokens, cols);
        act.reset(x.data(), n_tokens, cols);
        MatmulOutput outputs[std::size(kRows)];
        for (size_t o = 0; o < std::size(kRows); ++o) {
          y[i][o].assign(static_cast<size_t>(n_tokens * kRows[o]), 0.0f);
          outputs[o] = {&tensors[o], y[i][o].data(), kRows[o], o == 2 ? bias.data() : nullptr,
                        &packed[o]};
        }
        matmul(outputs, act, pool, isas[i]);
      }
      for (int i = 1; i < 3; ++i) {
        for (size_t o = 0; o < std::size(kRows); ++o) {
          for (size_t k = 0; k < y[0][o].size(); ++k) {
            ASSERT_TRUE(same_bits(y[i][o][k], y[0][o][k]))
                << type_name(type) << " " << kernel_isa_name(isas[i]) << ", " << cols
                << " columns, " << n_tokens << " tokens, output " << o << " token " << k / kRows[o]
                << " row " << k % kRows[o] << ": " << y[i][o][k] << " vs " << y[0][o][k];
          }
        }
      }
    }
  }
}

// One call over outputs of types whose AMX kernels configure the tile unit differently (the
// K-quants' tiles against the 32-element blocks'), one thread taking them in turn: the same bits
// as the AVX2 table's.
TEST(AmxKernel, MixedTypesInOneCallEqualAvx2) {
  SKIP_WITHOUT_AMX();
  constexpr TensorType kTypes[] = {TensorType::Q4_K, TensorType::Q4_1, TensorType::Q6_K,
                                   TensorType::Q8_0, TensorType::Q5_K};
  constexpr int64_t kRows = 32, kCols = 512, kTokens = 32;
  ThreadPool pool(1);
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<QTensor> tensors(std::size(kTypes));
  std::vector<PackedWeight> packed;
  for (size_t i = 0; i < std::size(kTypes); ++i) {
    bytes.push_back(make_weights(kTypes[i], kRows, kCols, static_cast<uint32_t>(7 + i)));
    tensors[i].name = "test";
    tensors[i].type = kTypes[i];
    tensors[i].shape = {kRows, kCols};
    tensors[i].data = bytes[i].data();
    tensors[i].n_bytes = bytes[i].size();
    packed.push_back(PackedWeight::pack(tensors[i], pool).value());
  }
  std::mt19937 rng(11);
  const std::vector<float> x = random_floats(kTokens * kCols, rng, 2.0f);
  std::vector<float> y[2][std::size(kTypes)];  // [avx2, amx][output]
  const KernelIsa isas[] = {KernelIsa::kAvx2, KernelIsa::kAvx512Amx};
  for (int i = 0; i < 2; ++i) {
    ActCache act(kTokens, kCols);
    act.reset(x.data(), kTokens, kCols);
    MatmulOutput outputs[std::size(kTypes)];
    for (size_t o = 0; o < std::size(kTypes); ++o) {
      y[i][o].assign(static_cast<size_t>(kTokens * kRows), 0.0f);
      outputs[o] = {&tensors[o], y[i][o].data(), kRows, nullptr, &packed[o]};
    }
    matmul(outputs, act, pool, isas[i]);
  }
  for (size_t o = 0; o < std::size(kTypes); ++o) {
    for (size_t k = 0; k < y[0][o].size(); ++k) {
      ASSERT_TRUE(same_bits(y[1][o][k], y[0][o][k]))
          << type_name(kTypes[o]) << " token " << k / kRows << " row " << k % kRows << ": "
          << y[1][o][k] << " vs " << y[0][o][k];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(BlockTypes, AmxKernelTest,
                         ::testing::Values(TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1,
                                           TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K),
                         [](const auto& info) { return std::string(type_name(info.param)); });

INSTANTIATE_TEST_SUITE_P(AllTypes, Avx512KernelTest, ::testing::ValuesIn(kWeightTypes),
                         [](const auto& info) { return std::string(type_name(info.param)); });
INSTANTIATE_TEST_SUITE_P(RowTypes, Avx512RowKernelTest,
                         ::testing::ValuesIn(std::vector<TensorType>{
                             TensorType::F32, TensorType::F16, TensorType::BF16}),
                         [](const auto& info) { return std::string(type_name(info.param)); });

// --- Whole forward passes -----------------------------------------------------------------

const fs::path kFixtures = fs::path(LLAMASERVE_FIXTURES_DIR) / "reference";

std::unique_ptr<Executor> make_executor(std::shared_ptr<const LoadedModel> model, CpuIsa isa) {
  CpuExecutorOptions options;
  options.kv_capacity_tokens = 256;
  options.threads = 2;
  options.cpu_isa = isa;
  auto executor = create_cpu_executor(std::move(model), options);
  EXPECT_TRUE(executor.is_ok()) << executor.status().to_string();
  return executor.is_ok() ? std::move(executor).value() : nullptr;
}

// A 37-token prompt (two sixteen-token AMX passes, then one four-token pass and one more row;
// nine four-token passes and one row without AMX) and one decode step of one sequence; the
// logits of every row.
constexpr int32_t kPromptTokens = 37;
std::vector<float> prompt_and_step(Executor& ex) {
  const int64_t n_vocab = ex.config().n_vocab;
  Batch batch;
  batch.blocks_per_seq = 4;
  batch.block_tables = {2, 0, 3, 1};
  for (int32_t i = 0; i < kPromptTokens; ++i) {
    batch.tokens.push_back(static_cast<int32_t>((i * 7919 + 11) % n_vocab));
    batch.positions.push_back(i);
    batch.seq_index.push_back(0);
    batch.logit_rows.push_back(i);
  }
  batch.seq_lengths = {kPromptTokens};
  std::vector<float> logits(kPromptTokens * static_cast<size_t>(n_vocab));
  EXPECT_TRUE(ex.forward(batch, logits).is_ok());
  batch.tokens = {5};
  batch.positions = {kPromptTokens};
  batch.seq_index = {0};
  batch.logit_rows = {0};
  batch.seq_lengths = {kPromptTokens + 1};
  std::vector<float> step(static_cast<size_t>(n_vocab));
  EXPECT_TRUE(ex.forward(batch, step).is_ok());
  logits.insert(logits.end(), step.begin(), step.end());
  return logits;
}

// The logits with the kernels forced to AVX-512 and with auto (AMX where the CPU has it)
// against those with AVX2.
void expect_same_logits(const std::shared_ptr<const LoadedModel>& model, const std::string& what) {
  auto avx2 = make_executor(model, CpuIsa::kAvx2);
  ASSERT_NE(avx2, nullptr);
  const std::vector<float> a = prompt_and_step(*avx2);
  for (const CpuIsa isa : {CpuIsa::kAvx512, CpuIsa::kAuto}) {
    auto ex = make_executor(model, isa);
    ASSERT_NE(ex, nullptr);
    const KernelIsa kernels = resolve_kernel_isa(isa);
    EXPECT_NE(ex->describe().find(std::string(kernel_isa_name(kernels)) + " kernels"),
              std::string::npos)
        << ex->describe();
    const std::vector<float> b = prompt_and_step(*ex);
    ASSERT_EQ(a.size(), b.size());
    size_t differing = 0;
    double worst = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!same_bits(a[i], b[i])) {
        ++differing;
        worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
      }
    }
    EXPECT_EQ(differing, 0u) << what << " (" << kernel_isa_name(kernels) << "): " << differing
                             << " of " << a.size() << " logits differ, by up to " << worst;
  }
}

class Avx512ForwardTest : public ::testing::TestWithParam<const char*> {};

TEST_P(Avx512ForwardTest, FixtureLogitsEqualAvx2) {
  SKIP_WITHOUT_AVX512();
  auto model = load_model((kFixtures / GetParam()).string());
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  expect_same_logits(*model, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Avx512ForwardTest,
                         ::testing::Values("tiny-gqa-q4_k.gguf", "tiny-gqa-q8_0.gguf",
                                           "tiny-qwen2-q8_0.gguf", "tiny-llama-f16.gguf"),
                         [](const auto& info) {
                           std::string name = info.param;
                           name = name.substr(0, name.find('.'));
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// The weight types no fixture has (Q4_0, Q4_1, Q5_K; with their mixes' Q6_K and Q8_0
// tensors), on a synthetic 4-layer model made in memory.
class Avx512SynthForwardTest : public ::testing::TestWithParam<const char*> {};

TEST_P(Avx512SynthForwardTest, LogitsEqualAvx2) {
  SKIP_WITHOUT_AVX512();
  SynthOptions options;
  options.shape = "tiny";
  options.type = GetParam();
  options.vocab_path = (fs::path(LLAMASERVE_FIXTURES_DIR) / "vocab-llama2-spm.gguf").string();
  options.threads = 2;
  options.progress = ProgressStyle::kSilent;
  auto synth = synthesize_in_memory(options);
  ASSERT_TRUE(synth.is_ok()) << synth.status().to_string();
  expect_same_logits(synth->model, GetParam());
}

INSTANTIATE_TEST_SUITE_P(FileTypes, Avx512SynthForwardTest,
                         ::testing::Values("q4_0", "q4_1", "q5_k_m", "bf16"),
                         [](const auto& info) { return std::string(info.param); });

// A real model, where it has been fetched (scripts/fetch_model.sh).
TEST(Avx512Forward, SmolLM2LogitsEqualAvx2) {
  SKIP_WITHOUT_AVX512();
  const fs::path path =
      fs::path(LLAMASERVE_SOURCE_DIR) / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!fs::exists(path)) GTEST_SKIP() << "model missing (scripts/fetch_model.sh): " << path;
  auto model = load_model(path.string());
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  expect_same_logits(*model, "SmolLM2 Q4_1");
}

// On any machine: --cpu-isa avx2 keeps to the AVX2 kernels and says so, directly and through
// the executor factory (the path the configuration takes); auto names what it chose.
TEST(CpuIsa, ForcingAvx2WorksEverywhere) {
  auto model = load_model((kFixtures / "tiny-gqa-q4_k.gguf").string());
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  auto avx2 = make_executor(*model, CpuIsa::kAvx2);
  ASSERT_NE(avx2, nullptr);
  EXPECT_NE(avx2->describe().find("avx2 kernels"), std::string::npos) << avx2->describe();
  const std::vector<float> logits = prompt_and_step(*avx2);
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));

  auto automatic = make_executor(*model, CpuIsa::kAuto);
  ASSERT_NE(automatic, nullptr);
  const std::string expected =
      std::string(kernel_isa_name(resolve_kernel_isa(CpuIsa::kAuto))) + " kernels";
  EXPECT_NE(automatic->describe().find(expected), std::string::npos) << automatic->describe();

  ExecutorOptions options;
  options.device = "cpu";
  options.threads = 1;
  options.kv_capacity_tokens = 64;
  options.cpu_isa = CpuIsa::kAvx2;
  auto from_factory = create_device_executor(*model, options);
  ASSERT_TRUE(from_factory.is_ok()) << from_factory.status().to_string();
  EXPECT_NE((*from_factory)->describe().find("avx2 kernels"), std::string::npos)
      << (*from_factory)->describe();
}

}  // namespace
}  // namespace llamaserve::cpu
