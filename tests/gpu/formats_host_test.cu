// The device-side weight decoders (formats.cuh) run on the host: every unit of every row of
// every weight type, in the layout upload_matrix produces, decodes to the values of quant's
// reference dequantize_row, and the units cover each row exactly once. Needs no GPU, so the
// bit-level layout logic is checked wherever the tests build.
#include <vector>

#include "backend/cuda/formats.cuh"
#include "backend/cuda/repack.h"
#include "test_util.h"

namespace llamaserve::cuda::testing {
namespace {

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
    if (!split) {
      std::copy_n(src, src_row, h.quants.begin() + r * layout->quant_row_bytes);
      continue;
    }
    const int64_t blocks = m.cols / traits(m.type).block_elems;
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* block = src + b * split->block_bytes;
      std::copy_n(block + split->body_offset, split->body_bytes,
                  h.quants.begin() + r * layout->quant_row_bytes + b * split->body_bytes);
      std::copy_n(block + split->scale_offset, split->scale_bytes,
                  h.scales.begin() + r * layout->scale_row_bytes + b * split->scale_bytes);
    }
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

}  // namespace
}  // namespace llamaserve::cuda::testing
