// The products' reference for the matvec and GEMM tests (cuda_kernels_test.cc, gemm_test.cc):
// y = X W^T in double beside the bound Σ |w x| that rounding errors grow with, and the check of
// a kernel's output against it. Matrix sizes are odd on purpose (769 rows, 5125 columns rounded
// up to the type's block).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "test_util.h"

namespace llamaserve::cuda::testing {

inline constexpr int64_t kRows = 769;
inline constexpr int64_t kCols = 5125;

// y[b][r] = Σ_c W[r][c] x[b][c] in double, and Σ |W x| (the scale rounding errors grow with).
struct Reference {
  std::vector<double> y;
  std::vector<double> bound;
};

inline Reference reference_product(const HostMatrix& m, const std::vector<float>& x,
                                   int64_t x_stride, int64_t n_act) {
  Reference ref{std::vector<double>(n_act * m.rows), std::vector<double>(n_act * m.rows)};
  for (int64_t b = 0; b < n_act; ++b) {
    for (int64_t r = 0; r < m.rows; ++r) {
      double sum = 0.0, bound = 0.0;
      for (int64_t c = 0; c < m.cols; ++c) {
        const double p = static_cast<double>(m.values[r * m.cols + c]) * x[b * x_stride + c];
        sum += p;
        bound += std::fabs(p);
      }
      ref.y[b * m.rows + r] = sum;
      ref.bound[b * m.rows + r] = bound;
    }
  }
  return ref;
}

// Every y[b * y_stride + r] within tolerance * bound of the reference (+ expected_extra).
inline void expect_close(const std::vector<float>& y, int64_t y_stride, const Reference& ref,
                         int64_t rows, int64_t n_act, double tolerance,
                         const std::vector<double>& extra = {}) {
  int failures = 0;
  double worst = 0.0;
  for (int64_t b = 0; b < n_act; ++b) {
    for (int64_t r = 0; r < rows; ++r) {
      const double expected = ref.y[b * rows + r] + (extra.empty() ? 0.0 : extra[b * rows + r]);
      const double got = y[b * y_stride + r];
      const double err = std::fabs(got - expected) / (ref.bound[b * rows + r] + 1e-6);
      worst = std::max(worst, std::isnan(got) ? INFINITY : err);
      if (!(err <= tolerance) && ++failures <= 5) {
        ADD_FAILURE() << "row " << b << " output " << r << ": got " << got << ", expected "
                      << expected << " (relative error " << err << ")";
      }
    }
  }
  EXPECT_EQ(failures, 0) << "worst relative error " << worst << ", tolerance " << tolerance;
}

}  // namespace llamaserve::cuda::testing
