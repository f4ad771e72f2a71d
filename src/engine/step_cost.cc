#include "engine/step_cost.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace llamaserve {

StepShape StepShape::chunk(int64_t first_position, int64_t n_rows) {
  // Row i attends to first_position + i + 1 positions.
  const auto n = static_cast<double>(n_rows);
  return {n, (n * static_cast<double>(first_position) + n * (n + 1) / 2) / 1000.0};
}

void StepCostModel::observe(const StepShape& shape, double seconds) {
  static const double kDecay = std::exp2(-1.0 / kHalfLife);
  const std::array<double, 3> x = {1.0, shape.rows, shape.kpositions};
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) xx_[i][j] = kDecay * xx_[i][j] + x[i] * x[j];
    xy_[i] = kDecay * xy_[i] + x[i] * seconds;
  }
  yy_ = kDecay * yy_ + seconds * seconds;
  ++n_samples_;
  if (ready()) refit();
}

void StepCostModel::refit() {
  // Least squares over every non-empty subset of the terms; the best fit whose coefficients
  // are all non-negative wins (with three terms, this is the non-negative least squares fit).
  double best_sse = std::numeric_limits<double>::infinity();
  std::array<double, 3> best{};
  for (int mask = 1; mask < 8; ++mask) {
    int idx[3];
    int n = 0;
    for (int i = 0; i < 3; ++i) {
      if (mask & (1 << i)) idx[n++] = i;
    }
    // Normal equations of the subset, solved by Gaussian elimination with partial pivoting;
    // a relative ridge keeps a term that never varied (all passes of one shape) solvable.
    double a[3][4];
    for (int r = 0; r < n; ++r) {
      for (int c = 0; c < n; ++c) a[r][c] = xx_[idx[r]][idx[c]];
      a[r][r] += 1e-9 * xx_[idx[r]][idx[r]] + 1e-30;
      a[r][n] = xy_[idx[r]];
    }
    bool singular = false;
    for (int col = 0; col < n && !singular; ++col) {
      int pivot = col;
      for (int r = col + 1; r < n; ++r) {
        if (std::abs(a[r][col]) > std::abs(a[pivot][col])) pivot = r;
      }
      if (a[pivot][col] == 0.0) {
        singular = true;
        break;
      }
      for (int c = 0; c <= n; ++c) std::swap(a[col][c], a[pivot][c]);
      for (int r = 0; r < n; ++r) {
        if (r == col) continue;
        const double f = a[r][col] / a[col][col];
        for (int c = col; c <= n; ++c) a[r][c] -= f * a[col][c];
      }
    }
    if (singular) continue;
    std::array<double, 3> coef{};
    bool feasible = true;
    for (int r = 0; r < n; ++r) {
      coef[idx[r]] = a[r][n] / a[r][r];
      if (!(coef[idx[r]] >= 0.0)) feasible = false;
    }
    if (!feasible) continue;
    // SSE = y.y - 2 c.(X^T y) + c^T (X^T X) c
    double sse = yy_;
    for (int i = 0; i < 3; ++i) {
      sse -= 2 * coef[i] * xy_[i];
      for (int j = 0; j < 3; ++j) sse += coef[i] * xx_[i][j] * coef[j];
    }
    if (sse < best_sse) {
      best_sse = sse;
      best = coef;
    }
  }
  coef_ = best;
}

double StepCostModel::pass_seconds(const StepShape& shape) const {
  return coef_[0] + added_seconds(shape);
}

double StepCostModel::added_seconds(const StepShape& shape) const {
  return coef_[1] * shape.rows + coef_[2] * shape.kpositions;
}

int64_t StepCostModel::rows_within(int64_t first_position, double seconds,
                                   int64_t max_rows) const {
  if (max_rows <= 0 || seconds <= 0) return 0;
  // added(n) = b n + c (n p + n (n + 1) / 2) / 1000 = q n^2 + l n, for n rows from position p.
  const double b = coef_[1], c = coef_[2];
  const double q = c / 2000.0;
  const double l = b + c * (static_cast<double>(first_position) + 0.5) / 1000.0;
  double n;
  if (q > 0) {
    n = (-l + std::sqrt(l * l + 4 * q * seconds)) / (2 * q);
  } else if (l > 0) {
    n = seconds / l;
  } else {
    return max_rows;  // rows cost nothing the model can see
  }
  if (!(n >= 0)) return 0;
  return std::min<int64_t>(max_rows, static_cast<int64_t>(std::floor(n)));
}

std::string StepCostModel::describe() const {
  return fmt::format("fixed {:.2f} ms + {:.2f} us/row + {:.2f} us per 1000 attention positions "
                     "({} passes)",
                     coef_[0] * 1e3, coef_[1] * 1e6, coef_[2] * 1e6, n_samples_);
}

}  // namespace llamaserve
