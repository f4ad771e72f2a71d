// The device-side weight decoders (formats.cuh) run on the host: every unit of every row of
// every weight type, in the layout upload_matrix produces, decodes to the values of quant's
// reference dequantize_row, and the units cover each row exactly once. Likewise the matvec's
// per-item dot products (dot_formats.cuh) against 8-bit activation blocks. Needs no GPU, so the
// bit-level layout logic is checked wherever the tests build.
#include <cstring>
#include <vector>

#include "backend/cuda/dot_formats.cuh"
#include "backend/cuda/formats.cuh"
#include "backend/cuda/matvec.h"
#include "backend/cuda/quant_mma.h"
#include "backend/cuda/quant_mma_lanes.cuh"
#include "backend/cuda/repack.h"
#include "test_util.h"

namespace llamaserve::cuda::testing {
namespace {

// launch_pair_order_codes in host memory: every thread's word, by the kernel's own offsets.
void pair_order_codes_on_host(const PairOrderCodes& codes, uint8_t* quants, int64_t rows,
                              int64_t blocks_per_row, int64_t quant_row_bytes) {
  const int64_t n_words = rows * blocks_per_row * (codes.bytes / 4);
  for (int64_t i = 0; i < n_words; ++i) {
    uint8_t* p = quants + pair_order_word_offset(codes, i, blocks_per_row, quant_row_bytes);
    uint32_t w;
    std::memcpy(&w, p, 4);
    w = swap_middle_bytes(w);
    std::memcpy(p, &w, 4);
  }
}

// The device layout of `m` built in host memory, as upload_matrix builds it on the device.
struct HostLayout {
  std::vector<uint8_t> quants;
  std::vector<uint8_t> scales;
  DeviceMatrix view;
};

HostLayout host_layout(const HostMatrix& m) {
  HostLayout h;
  const Result<DeviceMatrixLayout> layout = device_matrix_layout(m.type, m.rows, m.cols);
  EXPECT_TRUE(layout.is_ok()) << layout.status().to_string();
  h.quants.assign(layout->quant_bytes, 0);
  h.scales.assign(layout->scale_bytes, 0);
  const size_t src_row = row_bytes(m.type, static_cast<size_t>(m.cols));
  const std::optional<BlockSplit> split = block_split(m.type);
  for (int64_t r = 0; r < m.rows; ++r) {
    const uint8_t* src = m.bytes.data() + r * src_row;
    uint8_t* dst = h.quants.data() + r * layout->quant_row_bytes;
    const int64_t blocks = m.cols / traits(m.type).block_elems;
    if (!split) {
      std::copy_n(src, src_row, dst);
    } else {
      for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* block = src + b * split->block_bytes;
        std::copy_n(block + split->body_offset, split->body_bytes, dst + b * split->body_bytes);
        std::copy_n(block + split->scale_offset, split->scale_bytes,
                    h.scales.begin() + r * layout->scale_row_bytes + b * split->scale_bytes);
      }
    }
  }
  if (const std::optional<PairOrderCodes> codes = pair_order_codes(m.type)) {
    pair_order_codes_on_host(*codes, h.quants.data(), m.rows, m.cols / traits(m.type).block_elems,
                             layout->quant_row_bytes);
  }
  h.view.type = m.type;
  h.view.rows = m.rows;
  h.view.cols = m.cols;
  h.view.quants = h.quants.data();
  h.view.scales = h.scales.empty() ? nullptr : h.scales.data();
  h.view.quant_row_bytes = layout->quant_row_bytes;
  h.view.scale_row_bytes = layout->scale_row_bytes;
  return h;
}

// A word in pair order (bytes [b0, b2, b1, b3]) gives the codes of elements 0, 1 and 2, 3 of
// either nibble, minus the bias, as exact f16 pairs, for every nibble value in every place.
template <int kBias>
void check_nibble_pairs() {
  for (uint32_t v = 0; v < 16; ++v) {
    for (int place = 0; place < 8; ++place) {
      for (const uint32_t background : {0u, 0xffffffffu, 0x5a3c96e1u}) {
        const uint32_t gguf = (background & ~(0xfu << (4 * place))) | (v << (4 * place));
        const uint4 words = make_uint4(swap_middle_bytes(gguf), 0, 0, 0);
        for (int k = 0; k < 2; ++k) {
          __half2 pairs[8];
          nibble_run_pairs<kBias>(words, k, pairs);
          for (int e = 0; e < 4; ++e) {
            const __half2 pair = pairs[e / 2];
            const float got = __half2float(e % 2 == 0 ? __low2half(pair) : __high2half(pair));
            const int code = static_cast<int>((gguf >> (8 * e + 4 * k)) & 0xf);
            EXPECT_EQ(got, static_cast<float>(code - kBias))
                << std::hex << gguf << " run " << k << " element " << e << " bias " << kBias;
          }
        }
      }
    }
  }
}

TEST(NibblePairs, EveryNibbleInEveryPlace) {
  check_nibble_pairs<0>();  // Q4_1, Q4_K
  check_nibble_pairs<8>();  // Q4_0
}

// Every quantized type's codes are put in pair order at upload; the 4-bit ones are decoded from it
// by code_pairs.
TEST(PairOrder, EveryQuantizedTypeAndTheFourBitPairs) {
  for (const TensorType type : weight_types()) {
    const Status status = dispatch_weight_type(type, "test", [&]<TensorType T>() -> Status {
      constexpr bool kQuantized = requires { Format<T>::kCodeBias; };
      EXPECT_EQ(pair_order_codes(T).has_value(), kQuantized) << type_name(T);
      const bool four_bit = T == TensorType::Q4_0 || T == TensorType::Q4_1 || T == TensorType::Q4_K;
      EXPECT_EQ(kHasCodePairs<Format<T>>, four_bit) << type_name(T);
      return Status::ok();
    });
    EXPECT_TRUE(status.is_ok()) << status.to_string();
  }
}

class FormatsOnHost : public ::testing::TestWithParam<TensorType> {};

TEST_P(FormatsOnHost, EveryUnitDecodesLikeTheReference) {
  const TensorType type = GetParam();
  const int64_t rows = 7, cols = round_cols(type, 1100);
  const HostMatrix m = make_matrix(type, rows, cols, 2024);
  const HostLayout h = host_layout(m);
  const Status status = dispatch_weight_type(type, "test", [&]<TensorType T>() -> Status {
    using F = Format<T>;
    const int units = static_cast<int>(cols / kUnitElems<T>);
    std::vector<float> decoded(rows * cols, std::numeric_limits<float>::quiet_NaN());
    std::vector<int> hits(rows * cols, 0);
    for (int64_t r = 0; r < rows; ++r) {
      for (int u = 0; u < units; ++u) {
        const typename F::Raw raw = F::load(h.view, r, u);
        for (int k = 0; k < F::kRuns; ++k) {
          float q[F::kRunLen];
          float scale = 1.0f, min = 0.0f;
          F::decode(raw, u, k, q, scale, min);
          dequantize_run<F>(q, scale, min);
          for (int i = 0; i < F::kRunLen; ++i) {
            const int64_t c = F::run_base(u, k) + i;
            EXPECT_TRUE(c >= 0 && c < cols) << "unit " << u << " run " << k;
            if (c < 0 || c >= cols) return Status::ok();
            decoded[r * cols + c] = q[i];
            ++hits[r * cols + c];
          }
        }
      }
    }
    int failures = 0;
    for (int64_t r = 0; r < rows; ++r) {
      float row_max = 0.0f;
      for (int64_t c = 0; c < cols; ++c)
        row_max = std::max(row_max, std::fabs(m.values[r * cols + c]));
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t i = r * cols + c;
        // FMA in d * q + min: one ulp of the row's magnitude.
        if ((hits[i] != 1 || !(std::fabs(decoded[i] - m.values[i]) <= 1e-6f * row_max)) &&
            ++failures <= 5) {
          ADD_FAILURE() << "[" << r << "," << c << "]: decoded " << decoded[i] << " (" << hits[i]
                        << " times), reference " << m.values[i];
        }
      }
    }
    EXPECT_EQ(failures, 0);
    return Status::ok();
  });
  EXPECT_TRUE(status.is_ok()) << status.to_string();
}

INSTANTIATE_TEST_SUITE_P(AllTypes, FormatsOnHost, ::testing::ValuesIn(weight_types()),
                         type_param_name);

// quant_mma's lanes (quant_mma_lanes.cuh), both layouts where a type has two: over every step
// and lane of a quad, each element of each row decodes once, from the lane's codes, scales and
// mins, to the reference value at the column the lane reads its activation from; and the lane's
// f16 scales and mins are its fp32 ones rounded. The codes are the f16 pairs the kernel converts
// (lane_code_pairs), which must hold the codes exactly.
template <TensorType T, class L>
void check_mma_lanes(const HostMatrix& m, const HostLayout& h) {
  using F = Format<T>;
  const int64_t rows = m.rows, cols = m.cols;
  const int units = static_cast<int>(cols / kUnitElems<T>);
  const int steps = (units + 3) / 4;
  std::vector<float> decoded(rows * cols, std::numeric_limits<float>::quiet_NaN());
  std::vector<int> hits(rows * cols, 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int t = 0; t < steps; ++t) {
      for (int q = 0; q < 4; ++q) {
        const LaneStep s{t, q, std::min(4 * t + q, units - 1), units};
        const typename L::Raw raw = L::load(h.view, r, s);
        float scale[F::kRuns][2], min[F::kRuns][2] = {};
        L::scales(raw, s, scale, min);
        // The kernel's f16 scales: each value rounded once (from f16 arithmetic where the lanes
        // work them out so), the same bits as the fp32 ones rounded.
        __half2 half_scale[F::kRuns], half_min[F::kRuns];
        lane_half_scales<L>(raw, s, half_scale, half_min);
        for (int k = 0; k < F::kRuns; ++k) {
          const __half2 want_scale = __floats2half2_rn(scale[k][0], scale[k][1]);
          const __half2 want_min = __floats2half2_rn(min[k][0], min[k][1]);
          EXPECT_EQ(half2_bits(half_scale[k]), half2_bits(want_scale))
              << "row " << r << " step " << t << " lane " << q << " run " << k;
          EXPECT_EQ(half2_bits(half_min[k]), half2_bits(want_min))
              << "row " << r << " step " << t << " lane " << q << " run " << k;
        }
        for (int k = 0; k < F::kRuns; ++k) {
          __half2 pairs[8];  // the codes the kernel converts, minus kCodeBias
          lane_code_pairs<L>(raw, s, k, pairs);
          for (int e = 0; e < 16; ++e) {
            const int half = e / 8;
            if (!L::valid(s, half)) continue;  // the kernel zeroes its activations
            const int64_t c = L::x_col(s, k, half) + e % 8;
            EXPECT_TRUE(c >= 0 && c < cols) << "step " << t << " lane " << q << " run " << k;
            if (c < 0 || c >= cols) return;
            const __half2 pair = pairs[e / 2];
            const float code = __half2float(e % 2 == 0 ? __low2half(pair) : __high2half(pair));
            decoded[r * cols + c] = code * scale[k][half] + min[k][half];
            ++hits[r * cols + c];
          }
        }
      }
    }
  }
  int failures = 0;
  for (int64_t i = 0; i < rows * cols; ++i) {
    if ((hits[i] != 1 ||
         !(std::fabs(decoded[i] - m.values[i]) <= 1e-5f * (1.0f + std::fabs(m.values[i])))) &&
        ++failures <= 5) {
      ADD_FAILURE() << "[" << i / cols << "," << i % cols << "]: decoded " << decoded[i] << " ("
                    << hits[i] << " times), reference " << m.values[i];
    }
  }
  EXPECT_EQ(failures, 0);
}

class MmaLanesOnHost : public ::testing::TestWithParam<TensorType> {};

TEST_P(MmaLanesOnHost, EveryElementOnceAtItsActivationColumn) {
  const TensorType type = GetParam();
  if (!quant_mma_supported(type)) GTEST_SKIP() << "not a quant_mma type";
  // Rows of every number of blocks modulo 4: last steps of one to four units.
  for (int extra = 0; extra < 4; ++extra) {
    SCOPED_TRACE(extra);
    const int64_t rows = 5, cols = round_cols(type, 1100) + extra * traits(type).block_elems;
    const HostMatrix m = make_matrix(type, rows, cols, 77 + extra);
    const HostLayout h = host_layout(m);
    const Status status = dispatch_weight_type(type, "test", [&]<TensorType T>() -> Status {
      if constexpr (requires { Format<T>::kCodeBias; }) {
        check_mma_lanes<T, WholeUnits<T>>(m, h);
        if constexpr (kQuadPieces<T>) check_mma_lanes<T, QuadPieces<T>>(m, h);
      }
      return Status::ok();
    });
    EXPECT_TRUE(status.is_ok()) << status.to_string();
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MmaLanesOnHost, ::testing::ValuesIn(weight_types()),
                         type_param_name);

// Every row's sum of item dot products equals Σ_c w[c] · x[c] in double, x the activations as
// the kernel sees them (d · q for the 8-bit blocks, the floats themselves otherwise). A wrong
// pairing of weight and activation elements, a missed or doubled element, or a wrong scale or
// offset moves the sum by O(|w| |x|); fp32 rounding stays below 1e-5 of Σ |w x|.
class DotFormatsOnHost : public ::testing::TestWithParam<TensorType> {};

TEST_P(DotFormatsOnHost, ItemDotsSumToTheRowProduct) {
  const TensorType type = GetParam();
  const int64_t rows = 5, cols = round_cols(type, 1100);
  const HostMatrix m = make_matrix(type, rows, cols, 4242);
  const HostLayout h = host_layout(m);
  const std::vector<float> x = random_floats(static_cast<size_t>(cols), 17, 3.0f);
  std::vector<int8_t> qs(static_cast<size_t>(cols));
  std::vector<float4> ds(static_cast<size_t>(cols / kQ8Block));
  std::vector<double> x_seen(x.begin(), x.end());
  if (matvec_uses_q8(type)) {
    quantize_q8_reference(x.data(), cols, qs.data(), ds.data());
    for (int64_t c = 0; c < cols; ++c) {
      x_seen[c] = static_cast<double>(ds[c / kQ8Block].x) * qs[pair_order_byte(c)];
    }
  }
  const Status status = dispatch_weight_type(type, "test", [&]<TensorType T>() -> Status {
    using F = DotFormat<T>;
    EXPECT_EQ(F::kQ8, matvec_uses_q8(T));
    EXPECT_EQ(cols % F::kItemElems, 0);
    const int items = static_cast<int>(cols / F::kItemElems);
    for (int64_t r = 0; r < rows; ++r) {
      double want = 0.0, bound = 0.0;
      for (int64_t c = 0; c < cols; ++c) {
        want += static_cast<double>(m.values[r * cols + c]) * x_seen[c];
        bound += std::fabs(static_cast<double>(m.values[r * cols + c]) * x_seen[c]);
      }
      double got = 0.0;
      for (int i = 0; i < items; ++i) {
        const typename F::Decoded w = F::decode(F::load(h.view, r, i), i);
        if constexpr (F::kQ8) {
          got += F::dot(w, F::load_act(Q8Row{qs.data(), ds.data()}, i));
        } else {
          got += F::dot(w, F::load_act(x.data(), i));
        }
      }
      EXPECT_NEAR(got, want, 1e-5 * bound) << "row " << r;
    }
    return Status::ok();
  });
  EXPECT_TRUE(status.is_ok()) << status.to_string();
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DotFormatsOnHost, ::testing::ValuesIn(weight_types()),
                         type_param_name);

// Q4_K's high nibbles stay in place (codes times 16, the scale divided by 16): every item's dot
// has the same bits as the product of the shifted codes with the undivided scale.
TEST(DotFormatsOnHost, Q4KHighNibblesInPlaceGiveTheShiftedCodesBits) {
  using F = DotFormat<TensorType::Q4_K>;
  const int64_t rows = 3, cols = round_cols(TensorType::Q4_K, 1100);
  const HostMatrix m = make_matrix(TensorType::Q4_K, rows, cols, 99);
  const HostLayout h = host_layout(m);
  const std::vector<float> x = random_floats(static_cast<size_t>(cols), 5, 3.0f);
  std::vector<int8_t> qs(static_cast<size_t>(cols));
  std::vector<float4> ds(static_cast<size_t>(cols / kQ8Block));
  quantize_q8_reference(x.data(), cols, qs.data(), ds.data());
  const Q8Row act{qs.data(), ds.data()};
  for (int64_t r = 0; r < rows; ++r) {
    for (int i = 0; i < static_cast<int>(cols / F::kItemElems); ++i) {
      const F::Decoded w = F::decode(F::load(h.view, r, i), i);
      KQuantDecoded shifted = w;
      for (int half = 0; half < 2; ++half) {
        for (int k = 0; k < 4; ++k) shifted.hi[half][k] = w.hi[half][k] >> 4;
      }
      shifted.scale[1] = w.scale[1] * 16;
      const float want = k_quant_dot(shifted, F::load_act(act, i));
      EXPECT_EQ(F::dot(w, F::load_act(act, i)), want) << "row " << r << " item " << i;
    }
  }
}

// The host reference quantizer: codes within ±127 (in pair order), x ≈ d q to half a step, and
// the sums.
TEST(Q8Reference, CodesScalesAndSums) {
  std::vector<float> x = random_floats(96, 3, 2.0f);
  for (int i = 32; i < 64; ++i) x[i] = 0.0f;  // an all-zero block: d = 0, codes 0
  std::vector<int8_t> qs(96);
  std::vector<float4> ds(3);
  quantize_q8_reference(x.data(), 96, qs.data(), ds.data());
  for (int b = 0; b < 3; ++b) {
    int sums[2] = {0, 0};
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[32 * b + i]));
    for (int i = 0; i < 32; ++i) {
      const int q = qs[32 * b + pair_order_byte(i)];
      EXPECT_LE(std::abs(q), 127);
      EXPECT_NEAR(ds[b].x * q, x[32 * b + i], 0.5001f * ds[b].x + 1e-30f);
      sums[i / 16] += q;
    }
    EXPECT_FLOAT_EQ(ds[b].x, amax / 127.0f);
    EXPECT_FLOAT_EQ(ds[b].y, ds[b].x * static_cast<float>(sums[0] + sums[1]));
    EXPECT_FLOAT_EQ(ds[b].z, ds[b].x * static_cast<float>(sums[0]));
    EXPECT_FLOAT_EQ(ds[b].w, ds[b].x * static_cast<float>(sums[1]));
  }
  EXPECT_EQ(ds[1].x, 0.0f);
}

}  // namespace
}  // namespace llamaserve::cuda::testing
