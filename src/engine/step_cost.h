// StepCostModel: what a forward pass costs, learned from the engine's own measured passes, so
// that the scheduler can bound the prompt work it puts beside decodes in time, not only in rows.
//
// A pass is modelled as
//     seconds = fixed + per_row * rows + per_kpos * kpositions
// where rows are the pass's token rows and kpositions its attention work: the sum over rows of
// the positions each row attends to (its position + 1), in thousands. The fixed cost is about
// one read of the weights; per_row the products' share of each row; per_kpos the attention's
// share, which is what makes a chunk late in an 8k-token prompt cost many decode steps.
//
// The coefficients are a least-squares fit over the passes seen, older ones weighted down
// geometrically (a pass's weight halves every kHalfLife passes), constrained to be >= 0 (the
// best fit over the subsets of the three terms whose coefficients are all non-negative). The
// model is ready once it has seen kMinSamples passes.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace llamaserve {

// The features of a pass, or of part of one.
struct StepShape {
  double rows = 0;
  double kpositions = 0;  // attention positions over all rows, in thousands

  // A chunk of `n_rows` consecutive rows starting at position `first_position`.
  static StepShape chunk(int64_t first_position, int64_t n_rows);
  StepShape& operator+=(const StepShape& other) {
    rows += other.rows;
    kpositions += other.kpositions;
    return *this;
  }
};

class StepCostModel {
 public:
  static constexpr int kMinSamples = 16;
  static constexpr double kHalfLife = 256;

  // Records that a pass of `shape` took `seconds`.
  void observe(const StepShape& shape, double seconds);
  bool ready() const { return n_samples_ >= kMinSamples; }

  // Estimated seconds of a whole pass, and of the rows of `shape` added to one (no fixed cost).
  // PRECONDITION: ready().
  double pass_seconds(const StepShape& shape) const;
  double added_seconds(const StepShape& shape) const;
  // The most rows of a chunk starting at `first_position` whose added cost stays within
  // `seconds` (0 when not even one row fits). PRECONDITION: ready().
  int64_t rows_within(int64_t first_position, double seconds, int64_t max_rows) const;

  double fixed_seconds() const { return coef_[0]; }
  double per_row_seconds() const { return coef_[1]; }
  double per_kposition_seconds() const { return coef_[2]; }
  // "fixed 6.1 ms + 21.4 us/row + 8.9 us per 1000 attention positions (n passes)".
  std::string describe() const;

 private:
  void refit();

  // Decayed sums of x x^T, x y and y^2 over the passes, x = (1, rows, kpositions).
  std::array<std::array<double, 3>, 3> xx_{};
  std::array<double, 3> xy_{};
  double yy_ = 0;
  std::array<double, 3> coef_{};
  int64_t n_samples_ = 0;
};

}  // namespace llamaserve
