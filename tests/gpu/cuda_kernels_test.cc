// CUDA kernels against CPU references: weight upload + matvec for every weight type and 1 to 8
// and 16 activation rows, dequantization and embedding lookup. Sizes are odd on purpose (769
// rows, 5125 columns rounded up to the type's block). Outputs are poisoned with NaN before each
// run. The GEMM is in gemm_test.cc, the other kernels in cuda_ops_test.cc.
#include <algorithm>
#include <cmath>

#include "backend/cuda/act_quant.h"
#include "backend/cuda/dequant.h"
#include "backend/cuda/matvec.h"
#include "backend/cuda/matvec_launch.h"
#include "product_reference.h"
#include "quant/blocks.h"
#include "test_util.h"

namespace llamaserve::cuda::testing {
namespace {

class MatvecTest : public GpuTest, public ::testing::WithParamInterface<TensorType> {};

// Up to kMaxSplitMatvecRows activation rows, a launch may split each row group's columns over
// 1, 2 or 4 warps, and a float launch may take groups of 2 or 4 rows: the matvec tests run with
// the launcher's choices (0) and each split and group height forced.
constexpr int kSplits[] = {0, 1, 2, 4};

struct MatvecConfig {
  int split = 0;
  int group_rows = 0;
};

// The configurations a launch of n_act activation rows of `type` can take.
std::vector<MatvecConfig> matvec_configs(TensorType type, int64_t n_act) {
  std::vector<MatvecConfig> configs;
  const bool group_rows_apply = matvec_may_widen_groups(type, static_cast<int>(n_act));
  for (const int rows : {0, 2, kWideMatvecRows}) {
    if (rows != 0 && !group_rows_apply) continue;
    for (const int split : kSplits) configs.push_back({split, rows});
  }
  return configs;
}

std::string config_trace(const MatvecConfig& c) {
  std::string trace = c.split == 0 ? std::string("column split chosen per launch")
                                   : "column split forced to " + std::to_string(c.split);
  if (c.group_rows != 0) trace += ", groups of " + std::to_string(c.group_rows) + " rows";
  return trace;
}

void use_config(const MatvecConfig& c, MatvecArgs& args) {
  args.forced_split = c.split;
  args.forced_group_rows = c.group_rows;
}

// The activations a matvec of `type` multiplies with: x itself for float weights; for
// quantized weights x as 8-bit blocks, quantized on the device, checked byte for byte against
// the host reference quantizer, and returned as the values d · q the kernel sees.
struct MatvecInput {
  DeviceArray<float> x;
  DeviceArray<uint8_t> q8_storage;
  Q8Rows xq;
  std::vector<float> seen;  // row-major, stride x_stride
};

MatvecInput prepare_input(TensorType type, const std::vector<float>& x, int64_t x_stride,
                          int64_t n_act, int64_t cols) {
  MatvecInput in{DeviceArray<float>(x), {}, {}, x};
  if (!matvec_uses_q8(type)) return in;
  in.q8_storage = DeviceArray<uint8_t>(q8_rows_bytes(n_act, cols));
  in.q8_storage.poison();
  in.xq = q8_rows_view(in.q8_storage.get(), n_act, cols);
  const Status s = quantize_q8(in.x.get(), x_stride, n_act, cols, in.xq, nullptr);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(count_q8_mismatches(x, x_stride, n_act, cols, in.q8_storage, in.xq), 0);
  std::vector<int8_t> qs(cols);
  std::vector<float4> ds(cols / kQ8Block);
  for (int64_t b = 0; b < n_act; ++b) {
    quantize_q8_reference(x.data() + b * x_stride, cols, qs.data(), ds.data());
    for (int64_t c = 0; c < cols; ++c) {
      in.seen[b * x_stride + c] = ds[c / kQ8Block].x * static_cast<float>(qs[pair_order_byte(c)]);
    }
  }
  return in;
}

MatvecArgs matvec_args(const DeviceMatrix& w, const MatvecInput& in, int64_t x_stride,
                       int64_t n_act, float* y, int64_t y_stride) {
  MatvecArgs args;
  args.w = w;
  args.x = in.x.get();
  args.x_stride = x_stride;
  args.xq = in.xq;
  args.n_rows = static_cast<int32_t>(n_act);
  args.y = y;
  args.y_stride = y_stride;
  return args;
}

// Products are exact (integer dots of the 8-bit codes, or fp32 products of decoded floats), and
// the per-block scales and the sums run in fp32: far below this bound, while a layout or
// pairing mistake is O(1). The reference multiplies the values the kernel sees.
constexpr double kMatvecTolerance = 2e-5;

// Every kernel size (1..8 activation rows; 5 in the next test) and 16 rows (two groups of 8).
TEST_P(MatvecTest, MatchesReferenceForEveryRowCount) {
  const TensorType type = GetParam();
  const int64_t cols = round_cols(type, kCols);
  const HostMatrix m = make_matrix(type, kRows, cols, 1234);
  UploadedMatrix w = upload(m);
  ASSERT_NE(w.view.quants, nullptr);
  for (const int64_t n_act : {1, 2, 3, 4, 6, 7, 8, 16}) {
    SCOPED_TRACE("activation rows " + std::to_string(n_act));
    const int64_t x_stride = cols + 4;  // strided rows
    const int64_t y_stride = kRows + 3;
    const MatvecInput in =
        prepare_input(type, random_floats(n_act * x_stride, 99 + n_act), x_stride, n_act, cols);
    const Reference want = reference_product(m, in.seen, x_stride, n_act);
    DeviceArray<float> y_dev(n_act * y_stride);
    for (const MatvecConfig& config : matvec_configs(type, n_act)) {
      SCOPED_TRACE(config_trace(config));
      MatvecArgs args = matvec_args(w.view, in, x_stride, n_act, y_dev.get(), y_stride);
      use_config(config, args);
      y_dev.poison();
      ASSERT_OK(matvec(args, nullptr));
      ASSERT_CUDA(cudaDeviceSynchronize());
      expect_close(y_dev.download(), y_stride, want, kRows, n_act, kMatvecTolerance);
    }
  }
}

// 1 and 2 activation rows take every column split and (float weights; Q4_0 and Q4_1 at one row)
// both group heights, 5 whole rows in groups of two or four by the weight type.
TEST_P(MatvecTest, AccumulatesIntoOutputAndAddsBias) {
  const TensorType type = GetParam();
  const int64_t cols = round_cols(type, 1000);
  const int64_t rows = 131;
  const HostMatrix m = make_matrix(type, rows, cols, 77);
  UploadedMatrix w = upload(m);
  ASSERT_NE(w.view.quants, nullptr);
  for (const int64_t n_act : {1, 2, 5}) {
    SCOPED_TRACE("activation rows " + std::to_string(n_act));
    const MatvecInput in = prepare_input(type, random_floats(n_act * cols, 5), cols, n_act, cols);
    const std::vector<float> y0 = random_floats(n_act * rows, 6);
    const std::vector<float> bias = random_floats(rows, 7);
    const Reference want = reference_product(m, in.seen, cols, n_act);
    std::vector<double> extra(n_act * rows);
    for (int64_t b = 0; b < n_act; ++b) {
      for (int64_t r = 0; r < rows; ++r) extra[b * rows + r] = y0[b * rows + r] + bias[r];
    }
    DeviceArray<float> bias_dev(bias);
    for (const MatvecConfig& config : matvec_configs(type, n_act)) {
      SCOPED_TRACE(config_trace(config));
      DeviceArray<float> y_dev(y0);
      MatvecArgs args = matvec_args(w.view, in, cols, n_act, y_dev.get(), rows);
      use_config(config, args);
      args.bias = bias_dev.get();
      args.accumulate = true;
      ASSERT_OK(matvec(args, nullptr));
      ASSERT_CUDA(cudaDeviceSynchronize());
      expect_close(y_dev.download(), rows, want, rows, n_act, kMatvecTolerance, extra);
    }
  }
}

// Three matrices of different heights sharing one input in one launch (as Q, K and V do):
// each output as its own matvec would give, the bias only where given. 3 activation rows, and 1
// (which may take groups of four rows: parts of 257 and 130 rows end inside a group).
class MatvecPartsTest : public MatvecTest {
 protected:
  void run(int64_t n_act);
};

TEST_P(MatvecPartsTest, ThreeActivationRows) { run(3); }
TEST_P(MatvecPartsTest, OneActivationRow) { run(1); }

void MatvecPartsTest::run(int64_t n_act) {
  const TensorType type = GetParam();
  const int64_t cols = round_cols(type, 700);
  const std::vector<int64_t> heights = {257, 8, 130};
  std::vector<HostMatrix> hosts;
  std::vector<UploadedMatrix> uploaded;
  for (size_t i = 0; i < heights.size(); ++i) {
    hosts.push_back(make_matrix(type, heights[i], cols, 500 + static_cast<uint32_t>(i)));
    uploaded.push_back(upload(hosts.back()));
    ASSERT_NE(uploaded.back().view.quants, nullptr);
  }
  const MatvecInput in = prepare_input(type, random_floats(n_act * cols, 8), cols, n_act, cols);
  const std::vector<float> bias = random_floats(heights[1], 9);
  DeviceArray<float> bias_dev(bias);
  std::vector<DeviceArray<float>> outputs;
  std::vector<MatvecArgs> parts;
  for (size_t i = 0; i < heights.size(); ++i) {
    outputs.emplace_back(n_act * heights[i]);
    outputs.back().poison();
    parts.push_back(
        matvec_args(uploaded[i].view, in, cols, n_act, outputs.back().get(), heights[i]));
  }
  parts[1].bias = bias_dev.get();
  std::vector<Reference> wants;
  std::vector<std::vector<double>> extras(heights.size());
  for (size_t i = 0; i < heights.size(); ++i) {
    wants.push_back(reference_product(hosts[i], in.seen, cols, n_act));
    if (i == 1) {
      for (int64_t b = 0; b < n_act; ++b)
        extras[i].insert(extras[i].end(), bias.begin(), bias.end());
    }
  }
  for (const MatvecConfig& config : matvec_configs(type, n_act)) {
    SCOPED_TRACE(config_trace(config));
    for (MatvecArgs& part : parts) use_config(config, part);
    for (auto& out : outputs) out.poison();
    ASSERT_OK(matvec_parts(parts, nullptr));
    ASSERT_CUDA(cudaDeviceSynchronize());
    for (size_t i = 0; i < heights.size(); ++i) {
      SCOPED_TRACE("part " + std::to_string(i));
      expect_close(outputs[i].download(), heights[i], wants[i], heights[i], n_act, kMatvecTolerance,
                   extras[i]);
    }
  }
  // Parts that do not share their input are refused.
  parts[2].n_rows = static_cast<int32_t>(n_act) + 1;
  EXPECT_FALSE(matvec_parts(parts, nullptr).is_ok());
}

// Short rows (up to 256 items a row: 2048 F16 columns, as a tensor-parallel shard's output
// projection has) take the kernel that loads a whole group before its wait, for up to 4
// activation rows and float weights, where the launcher picks the split. Its sums run in the
// same order as the whole-row kernel's: its outputs match those of split 1 bit for bit. Rows of
// one item, of 255 and 256, and of 257 (the other kernel, which may then pick a column split
// and sum in another order); an odd number of rows. Groups of two rows, as the short-rows kernel
// takes (groups of four sum a group's lanes in another order).
TEST_P(MatvecTest, ShortRowsMatchTheWholeRowKernel) {
  const TensorType type = GetParam();
  const bool float_weights = !matvec_uses_q8(type);
  const int64_t rows = 4099;
  const int64_t item_elems = type == TensorType::F32 ? 4 : 8;  // 16 bytes of float weights
  for (const int64_t items : {1, 255, 256, 257}) {
    const int64_t cols = round_cols(type, items * item_elems);
    SCOPED_TRACE("columns " + std::to_string(cols));
    const HostMatrix m = make_matrix(type, rows, cols, 4242 + static_cast<uint32_t>(items));
    UploadedMatrix w = upload(m);
    ASSERT_NE(w.view.quants, nullptr);
    for (const int64_t n_act : {1, 4}) {
      SCOPED_TRACE("activation rows " + std::to_string(n_act));
      const MatvecInput in =
          prepare_input(type, random_floats(n_act * cols, 17 + n_act), cols, n_act, cols);
      const Reference want = reference_product(m, in.seen, cols, n_act);
      std::vector<float> by_split[2];
      for (const int split : {0, 1}) {
        DeviceArray<float> y_dev(n_act * rows);
        y_dev.poison();
        MatvecArgs args = matvec_args(w.view, in, cols, n_act, y_dev.get(), rows);
        args.forced_group_rows = 2;
        args.forced_split = split;
        ASSERT_OK(matvec(args, nullptr));
        ASSERT_CUDA(cudaDeviceSynchronize());
        by_split[split] = y_dev.download();
        expect_close(by_split[split], rows, want, rows, n_act, kMatvecTolerance);
      }
      if (float_weights && items <= 256) {
        EXPECT_EQ(
            std::memcmp(by_split[0].data(), by_split[1].data(), by_split[0].size() * sizeof(float)),
            0);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MatvecTest, ::testing::ValuesIn(weight_types()),
                         type_param_name);
INSTANTIATE_TEST_SUITE_P(AllTypes, MatvecPartsTest, ::testing::ValuesIn(weight_types()),
                         type_param_name);

// The launcher's grid and column split (host logic, no GPU): an H200 with 6 matvec CTAs of 4
// warps per SM holds 3168 warps.
MatvecShape h200_shape(int64_t n_groups, int n_steps, bool whole_rows = false) {
  MatvecShape shape;
  shape.n_groups = n_groups;
  shape.n_steps = n_steps;
  shape.whole_rows = whole_rows;
  shape.sms = 132;
  shape.ctas_per_sm = {6, 6, 6};
  return shape;
}

TEST(MatvecGrid, SplitsOnlyFloatLaunchesThatLeaveWarpsIdle) {
  // 4096 rows in groups of 2, 15 steps a group (K = 11008, F16): whole rows keep 2048 of 3168
  // warps busy; four warps a group keep 683 of 792 units busy, 3 groups each.
  const MatvecGrid down = choose_matvec_grid(h200_shape(2048, 15), 0);
  EXPECT_EQ(down.split, 4);
  EXPECT_EQ(down.ctas, 683);
  EXPECT_NEAR(down.busy, 683.0 / 792.0, 1e-12);
  const MatvecGrid whole = choose_matvec_grid(h200_shape(2048, 15), 1);
  EXPECT_EQ(whole.split, 1);
  EXPECT_EQ(whole.ctas, 512);
  EXPECT_NEAR(whole.busy, 2048.0 / 3168.0, 1e-12);
  // 11008 rows: 5504 groups, 2 a warp on 2752 warps (87% busy): whole rows.
  EXPECT_EQ(choose_matvec_grid(h200_shape(5504, 6), 0).split, 1);
  // Launches that keep whole rows (most quantized ones) do so however idle the warps.
  EXPECT_EQ(choose_matvec_grid(h200_shape(2048, 15, true), 0).split, 1);
  // No warp goes without a step: 3 steps a group allow 2 warps, not 4 (2 give no more busy
  // warps here, so the rows stay whole).
  EXPECT_EQ(choose_matvec_grid(h200_shape(2048, 3), 0).split, 1);
  // A small matrix (385 groups) takes the widest split.
  const MatvecGrid small = choose_matvec_grid(h200_shape(385, 20), 0);
  EXPECT_EQ(small.split, 4);
  EXPECT_EQ(small.ctas, 385);
  // A forced split holds where its kernel exists; batches above kMaxSplitMatvecRows have only
  // whole rows.
  EXPECT_EQ(choose_matvec_grid(h200_shape(5504, 6), 2).split, 2);
  EXPECT_EQ(choose_matvec_grid(h200_shape(5504, 6, true), 4).split, 4);
  MatvecShape wide = h200_shape(2048, 15);
  wide.ctas_per_sm = {6, 0, 0};
  EXPECT_EQ(choose_matvec_grid(wide, 0).split, 1);
  EXPECT_EQ(choose_matvec_grid(wide, 4).split, 1);
  // The kernel's units stride over the groups (unit u takes u, u + N, ... for N units in the
  // grid): no unit takes more groups than the fewest the resident units allow, and the grid
  // never holds more units than are resident.
  for (const int64_t groups : {1, 7, 385, 2048, 5504, 16000, 100000}) {
    for (const int forced : {1, 2, 4}) {
      const MatvecGrid g = choose_matvec_grid(h200_shape(groups, 8), forced);
      const int64_t units_per_cta = kMatvecWarps / g.split;
      const int64_t resident = 132 * 6 * units_per_cta;
      const int64_t units = g.ctas * units_per_cta;
      EXPECT_LE(g.ctas, 132 * 6) << groups << " groups, split " << forced;
      EXPECT_EQ((groups + units - 1) / units, (groups + resident - 1) / resident)
          << groups << " groups, split " << forced;
    }
  }
}

// Groups of four rows for float launches of one activation row whose groups of two, whole,
// keep fewer than 75% of the resident warps streaming, and for every float launch of 2 to 4.
TEST(MatvecGrid, WidensGroupsOnlyWhereGroupsOfTwoLeaveWarpsIdle) {
  // 4096 rows: 2048 groups of two on 3168 warps (65%).
  EXPECT_EQ(choose_matvec_group_rows(h200_shape(2048, 15), 1, 0), kWideMatvecRows);
  // 6144, 11008 and 12288 rows: 97%, 87%, 97%.
  EXPECT_EQ(choose_matvec_group_rows(h200_shape(3072, 6), 1, 0), 2);
  EXPECT_EQ(choose_matvec_group_rows(h200_shape(5504, 6), 1, 0), 2);
  EXPECT_EQ(choose_matvec_group_rows(h200_shape(6144, 6), 1, 0), 2);
  // A small matrix.
  EXPECT_EQ(choose_matvec_group_rows(h200_shape(385, 20), 1, 0), kWideMatvecRows);
  // More activation rows: groups of four whatever the shape.
  for (const int batch : {2, 3, 4}) {
    EXPECT_EQ(choose_matvec_group_rows(h200_shape(6144, 6), batch, 0), kWideMatvecRows);
  }
  // Forced either way; other values leave the choice to the launcher.
  EXPECT_EQ(choose_matvec_group_rows(h200_shape(2048, 15), 1, 2), 2);
  EXPECT_EQ(choose_matvec_group_rows(h200_shape(2048, 15), 4, 2), 2);
  EXPECT_EQ(choose_matvec_group_rows(h200_shape(6144, 6), 1, kWideMatvecRows), kWideMatvecRows);
  EXPECT_EQ(choose_matvec_group_rows(h200_shape(6144, 6), 1, 3), 2);
}

// Which launches may take groups of four rows: float weights up to kMaxSplitMatvecRows
// activation rows, Q4_0 and Q4_1 at one.
TEST(MatvecGrid, WideGroupsApplyToFloatBatchesAndSomeQuantizedRows) {
  for (const TensorType t : {TensorType::F32, TensorType::F16, TensorType::BF16}) {
    for (int rows = 1; rows <= kMaxSplitMatvecRows; ++rows) {
      EXPECT_TRUE(matvec_may_widen_groups(t, rows));
    }
    EXPECT_FALSE(matvec_may_widen_groups(t, kMaxSplitMatvecRows + 1));
  }
  for (const TensorType t : {TensorType::Q4_0, TensorType::Q4_1}) {
    EXPECT_TRUE(matvec_may_widen_groups(t, 1));
    EXPECT_FALSE(matvec_may_widen_groups(t, 2));
  }
  for (const TensorType t :
       {TensorType::Q8_0, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K}) {
    EXPECT_FALSE(matvec_may_widen_groups(t, 1));
  }
}

// Groups of four rows take two items a step up to two activation rows, and for three or four
// where their whole rows keep the resident warps streaming (3 CTAs per SM: 1584 warps).
TEST(MatvecGrid, WideGroupsTakeOneItemWhereTwoLeaveWarpsIdle) {
  MatvecShape tall = h200_shape(2752, 22);  // 11008 rows in groups of four
  tall.ctas_per_sm = {3, 3, 3};
  MatvecShape square = h200_shape(1024, 8);  // 4096 rows
  square.ctas_per_sm = {3, 3, 3};
  EXPECT_EQ(choose_wide_matvec_unroll(square, 1), kWideMatvecUnroll);
  EXPECT_EQ(choose_wide_matvec_unroll(square, 2), kWideMatvecUnroll);
  EXPECT_EQ(choose_wide_matvec_unroll(square, 3), 1);
  EXPECT_EQ(choose_wide_matvec_unroll(square, 4), 1);
  EXPECT_EQ(choose_wide_matvec_unroll(tall, 4), kWideMatvecUnroll);
}

TEST(MatvecContract, RejectsMissingOrMisalignedActivations) {
  MatvecArgs args;
  args.w.type = TensorType::F16;
  args.w.rows = 4;
  args.w.cols = 32;
  args.w.quants = reinterpret_cast<const uint8_t*>(256);
  args.x = reinterpret_cast<const float*>(260);  // not 16-byte aligned
  args.y = reinterpret_cast<float*>(512);
  Status s = matvec(args, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  // Quantized weights need the 8-bit blocks, 16-byte aligned.
  args.w.type = TensorType::Q4_0;
  args.x = reinterpret_cast<const float*>(1024);
  s = matvec(args, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  args.xq.qs = reinterpret_cast<int8_t*>(1032);
  args.xq.ds = reinterpret_cast<float4*>(2048);
  args.xq.qs_stride = 32;
  args.xq.ds_stride = 1;
  s = matvec(args, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
}

TEST(DeviceLayout, RefusesRowsThatAreNotWholeBlocks) {
  EXPECT_FALSE(device_matrix_layout(TensorType::Q4_K, 4, 300).is_ok());
  EXPECT_FALSE(device_matrix_layout(TensorType::F16, 4, 30).is_ok());
  EXPECT_FALSE(device_matrix_layout(TensorType::Q5_0, 4, 32).is_ok());
  ASSERT_TRUE(device_matrix_layout(TensorType::Q6_K, 3, 512).is_ok());
  const DeviceMatrixLayout l = *device_matrix_layout(TensorType::Q6_K, 3, 512);
  EXPECT_EQ(l.quant_row_bytes, 2 * 208);
  EXPECT_EQ(l.scale_row_bytes, 2 * 2);
}

class DequantTest : public GpuTest, public ::testing::WithParamInterface<TensorType> {};

TEST_P(DequantTest, RowsToFloatAndHalfMatchReferenceDecoder) {
  const TensorType type = GetParam();
  const int64_t cols = round_cols(type, 777);
  const int64_t rows = 53;
  const HostMatrix m = make_matrix(type, rows, cols, 4321);
  UploadedMatrix w = upload(m);
  ASSERT_NE(w.view.quants, nullptr);
  const int64_t stride = cols + 8;

  DeviceArray<float> out(rows * stride);
  out.poison();
  DequantArgs args;
  args.w = w.view;
  args.n_rows = rows;
  args.out_type = DequantOut::kF32;
  args.dst = out.get();
  args.dst_stride = stride;
  ASSERT_OK(dequantize_rows(args, nullptr));
  const std::vector<float> f32 = out.download();

  DeviceArray<uint16_t> out_half(rows * stride);
  out_half.poison();
  args.out_type = DequantOut::kF16;
  args.dst = out_half.get();
  ASSERT_OK(dequantize_rows(args, nullptr));
  const std::vector<uint16_t> f16 = out_half.download();

  int failures = 0;
  for (int64_t r = 0; r < rows; ++r) {
    float row_max = 0.0f;
    for (int64_t c = 0; c < cols; ++c)
      row_max = std::max(row_max, std::fabs(m.values[r * cols + c]));
    for (int64_t c = 0; c < cols; ++c) {
      const float expected = m.values[r * cols + c];
      const float got = f32[r * stride + c];
      // FMA contraction in d * q - m: an ulp of the row's magnitude.
      if (!(std::fabs(got - expected) <= 1e-6f * row_max) && ++failures <= 5) {
        ADD_FAILURE() << "f32 [" << r << "," << c << "]: " << got << " vs " << expected;
      }
      const float got_half = half_to_float(Half{f16[r * stride + c]});
      if (!(std::fabs(got_half - expected) <= std::fabs(expected) * 0x1p-10f + 1e-6f * row_max) &&
          ++failures <= 5) {
        ADD_FAILURE() << "f16 [" << r << "," << c << "]: " << got_half << " vs " << expected;
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST_P(DequantTest, EmbeddingLookupGathersTokenRows) {
  const TensorType type = GetParam();
  const int64_t cols = round_cols(type, 300);
  const int64_t rows = 101;
  const HostMatrix m = make_matrix(type, rows, cols, 55);
  UploadedMatrix w = upload(m);
  ASSERT_NE(w.view.quants, nullptr);
  const std::vector<int32_t> tokens = {5, 0, 100, 5, 17, 63, 99};
  DeviceArray<int32_t> tokens_dev(tokens);
  const int64_t stride = cols + 16;
  DeviceArray<float> out(tokens.size() * stride);
  out.poison();
  DequantArgs args;
  args.w = w.view;
  args.row_ids = tokens_dev.get();
  args.n_rows = static_cast<int64_t>(tokens.size());
  args.dst = out.get();
  args.dst_stride = stride;
  ASSERT_OK(dequantize_rows(args, nullptr));
  const std::vector<float> got = out.download();
  for (size_t i = 0; i < tokens.size(); ++i) {
    for (int64_t c = 0; c < cols; ++c) {
      const float expected = m.values[tokens[i] * cols + c];
      ASSERT_NEAR(got[i * stride + c], expected, 1e-5f * (1.0f + std::fabs(expected)))
          << "token " << tokens[i] << " element " << c;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DequantTest, ::testing::ValuesIn(weight_types()),
                         type_param_name);

}  // namespace
}  // namespace llamaserve::cuda::testing
