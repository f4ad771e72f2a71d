// Q4_K, Q5_K and Q6_K encoders.
//
// Each super-block is encoded in two stages:
//  1. per sub-block, a search for the float scale (and min) that minimises the squared
//     error of the sub-block: a sweep of candidate grids, each followed by the least-squares
//     scale/min for the quants it produced, then Lloyd iterations (re-quantize, re-fit) on
//     the best candidate;
//  2. the sub-block scales are themselves quantized (6-bit unsigned for Q4_K/Q5_K, int8 for
//     Q6_K) against a f16 super-block scale, and each sub-block then picks, among the
//     neighbouring integer scales, the one whose re-quantized values give the least error,
//     computed with the same float operations the decoder uses.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "quant/quantize_blocks.h"

namespace llamaserve::quant_internal {
namespace {

constexpr int kSubBlocks = kQK_K / 32;  // Q4_K / Q5_K: 8 sub-blocks of 32
constexpr int kGroups = kQK_K / 16;     // Q6_K: 16 groups of 16
constexpr int kGridSteps = 10;          // candidate grids: nmax + 0.1 * step, |step| <= 10
constexpr int kLloydIterations = 4;

// Round to nearest, clamped to [lo, hi] before the conversion (also maps nan to lo), so a
// huge quotient never overflows the int.
inline int round_clamped(float v, int lo, int hi) {
  if (!(v > static_cast<float>(lo))) return lo;
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(std::nearbyint(v));
}

// x ≈ scale * q - min with q in [0, nmax], scale >= 0 and min >= 0 (the stored min is
// unsigned, so the grid always reaches down to a value <= 0).
struct AffineFit {
  float scale = 0.0f;
  float min = 0.0f;
};

// Least-squares scale/min for fixed quants, under the min >= 0 constraint.
AffineFit solve_affine(const float* x, const int* q, int n) {
  double sum_q = 0, sum_qq = 0, sum_x = 0, sum_xq = 0;
  for (int i = 0; i < n; ++i) {
    sum_q += q[i];
    sum_qq += static_cast<double>(q[i]) * q[i];
    sum_x += x[i];
    sum_xq += static_cast<double>(x[i]) * q[i];
  }
  AffineFit fit;
  const double det = n * sum_qq - sum_q * sum_q;
  if (det <= 0) {
    // All quants equal (k): the best fit is the constant mean(x), reached by min = -mean
    // when it is negative, else by scale = mean / k (impossible when k = 0: then 0).
    const double mean = sum_x / n;
    if (mean < 0) {
      fit.min = static_cast<float>(-mean);
    } else if (sum_qq > 0) {
      fit.scale = static_cast<float>(sum_xq / sum_qq);
    }
    return fit;
  }
  double scale = (n * sum_xq - sum_q * sum_x) / det;
  double offset = (sum_x - scale * sum_q) / n;
  if (offset > 0) {  // constraint active: fit through the origin
    offset = 0;
    scale = sum_xq / sum_qq;
  }
  fit.scale = static_cast<float>(std::max(scale, 0.0));
  fit.min = static_cast<float>(-offset);
  return fit;
}

void quantize_affine(const float* x, int n, int nmax, float scale, float min, int* q) {
  if (scale <= 0.0f) {
    std::fill(q, q + n, 0);
    return;
  }
  const float inverse_scale = 1.0f / scale;
  for (int i = 0; i < n; ++i) q[i] = round_clamped((x[i] + min) * inverse_scale, 0, nmax);
}

// Error as the decoder sees it: y = scale * q - min in float.
double affine_error(const float* x, const int* q, int n, float scale, float min) {
  double err = 0;
  for (int i = 0; i < n; ++i) {
    const double diff = static_cast<double>(scale * static_cast<float>(q[i]) - min) - x[i];
    err += diff * diff;
  }
  return err;
}

AffineFit fit_affine_sub_block(const float* x, int n, int nmax) {
  float lo = 0.0f;
  float hi = x[0];
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  AffineFit best;
  if (!(hi > lo)) {  // every element equals lo <= 0
    best.min = -lo;
    return best;
  }
  int q[32];
  double best_err = std::numeric_limits<double>::infinity();
  for (int step = -kGridSteps; step <= kGridSteps; ++step) {
    const float inverse_scale = (static_cast<float>(nmax) + 0.1f * step) / (hi - lo);
    for (int i = 0; i < n; ++i) q[i] = round_clamped(inverse_scale * (x[i] - lo), 0, nmax);
    const AffineFit fit = solve_affine(x, q, n);
    const double err = affine_error(x, q, n, fit.scale, fit.min);
    if (err < best_err) {
      best_err = err;
      best = fit;
    }
  }
  for (int iteration = 0; iteration < kLloydIterations; ++iteration) {
    quantize_affine(x, n, nmax, best.scale, best.min, q);
    const AffineFit fit = solve_affine(x, q, n);
    const double err = affine_error(x, q, n, fit.scale, fit.min);
    if (!(err < best_err)) break;
    best_err = err;
    best = fit;
  }
  return best;
}

// Stage 2 for Q4_K / Q5_K: 6-bit sc/m, f16 d/dmin, and the final quants q[256].
void quantize_k_affine(const float* x, int nmax, Half* d_out, Half* dmin_out, uint8_t* scales,
                       uint8_t* q_out) {
  AffineFit fits[kSubBlocks];
  float max_scale = 0.0f;
  float max_min = 0.0f;
  for (int j = 0; j < kSubBlocks; ++j) {
    fits[j] = fit_affine_sub_block(x + 32 * j, 32, nmax);
    max_scale = std::max(max_scale, fits[j].scale);
    max_min = std::max(max_min, fits[j].min);
  }
  *d_out = float_to_half(max_scale / 63);
  *dmin_out = float_to_half(max_min / 63);
  const float d = half_to_float(*d_out);
  const float dmin = half_to_float(*dmin_out);

  uint8_t sc[kSubBlocks];
  uint8_t m[kSubBlocks];
  int q[32];
  for (int j = 0; j < kSubBlocks; ++j) {
    const float* xs = x + 32 * j;
    const int sc0 = d > 0.0f ? round_clamped(fits[j].scale / d, 0, 63) : 0;
    const int m0 = dmin > 0.0f ? round_clamped(fits[j].min / dmin, 0, 63) : 0;
    double best_err = std::numeric_limits<double>::infinity();
    for (int ls = std::max(0, sc0 - 1); ls <= std::min(63, sc0 + 1); ++ls) {
      for (int lm = std::max(0, m0 - 1); lm <= std::min(63, m0 + 1); ++lm) {
        // The decoder's own products: d * sc and dmin * m in float.
        const float scale = d * static_cast<float>(ls);
        const float min = dmin * static_cast<float>(lm);
        quantize_affine(xs, 32, nmax, scale, min, q);
        const double err = affine_error(xs, q, 32, scale, min);
        if (err < best_err) {
          best_err = err;
          sc[j] = static_cast<uint8_t>(ls);
          m[j] = static_cast<uint8_t>(lm);
          for (int i = 0; i < 32; ++i) q_out[32 * j + i] = static_cast<uint8_t>(q[i]);
        }
      }
    }
  }
  pack_q4_k_scales(sc, m, scales);
}

// Q6_K: x ≈ scale * q with q in [-32, 31]; scale may be negative, which lets the element of
// largest magnitude use the extra level at -32.
float fit_symmetric_group(const float* x, int n) {
  float max_value = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > std::fabs(max_value)) max_value = x[i];
  }
  if (max_value == 0.0f) return 0.0f;

  // Optimal scale for fixed q and its error: s = <x,q>/<q,q>, err = <x,x> - s * <x,q>.
  auto fit = [&](const int* quants, double* err_out) {
    double sum_xq = 0, sum_qq = 0, sum_xx = 0;
    for (int i = 0; i < n; ++i) {
      sum_xq += static_cast<double>(x[i]) * quants[i];
      sum_qq += static_cast<double>(quants[i]) * quants[i];
      sum_xx += static_cast<double>(x[i]) * x[i];
    }
    const double scale = sum_qq > 0 ? sum_xq / sum_qq : 0.0;
    *err_out = sum_xx - scale * sum_xq;
    return static_cast<float>(scale);
  };

  int candidate[16];
  float best_scale = 0.0f;
  double best_err = std::numeric_limits<double>::infinity();
  for (const float target : {-32.0f, 31.0f}) {  // where max_value lands on the grid
    for (int step = -kGridSteps; step <= kGridSteps; ++step) {
      const float magnitude = std::fabs(target) + 0.1f * step;
      const float inverse_scale = std::copysign(magnitude, target) / max_value;
      for (int i = 0; i < n; ++i) candidate[i] = round_clamped(inverse_scale * x[i], -32, 31);
      double err;
      const float scale = fit(candidate, &err);
      if (err < best_err) {
        best_err = err;
        best_scale = scale;
      }
    }
  }
  for (int iteration = 0; iteration < kLloydIterations; ++iteration) {
    if (best_scale == 0.0f) break;
    for (int i = 0; i < n; ++i) candidate[i] = round_clamped(x[i] / best_scale, -32, 31);
    double err;
    const float scale = fit(candidate, &err);
    if (!(err < best_err)) break;
    best_err = err;
    best_scale = scale;
  }
  return best_scale;
}

}  // namespace

void pack_q4_k_scales(const uint8_t* sc, const uint8_t* m, uint8_t* scales) {
  for (int j = 0; j < 4; ++j) {
    scales[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    scales[j + 4] = static_cast<uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
    scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0x0f) | ((m[j + 4] & 0x0f) << 4));
  }
}

void pack_k_quants(const uint8_t* q, uint8_t* qs, uint8_t* qh) {
  std::memset(qs, 0, kQK_K / 2);
  if (qh != nullptr) std::memset(qh, 0, kQK_K / 8);
  for (int i = 0; i < kQK_K; ++i) {
    const int chunk = i / 64;
    const int within = i % 64;
    const int nibble = q[i] & 0x0f;
    qs[chunk * 32 + within % 32] |= static_cast<uint8_t>(within < 32 ? nibble : nibble << 4);
    if (qh != nullptr) qh[i % 32] |= static_cast<uint8_t>(((q[i] >> 4) & 1) << (i / 32));
  }
}

void pack_q6_k_quants(const int8_t* q, uint8_t* ql, uint8_t* qh) {
  std::memset(ql, 0, kQK_K / 2);
  std::memset(qh, 0, kQK_K / 4);
  for (int i = 0; i < kQK_K; ++i) {
    const int biased = q[i] + 32;  // [0, 63]
    const int half = i / 128;
    const int quarter = (i % 128) / 32;
    const int l = i % 32;
    const int low = biased & 0x0f;
    ql[64 * half + l + 32 * (quarter & 1)] |= static_cast<uint8_t>(quarter < 2 ? low : low << 4);
    qh[32 * half + l] |= static_cast<uint8_t>((biased >> 4) << (2 * quarter));
  }
}

void quantize_block_q4_k(const float* x, BlockQ4_K* block) {
  uint8_t q[kQK_K];
  quantize_k_affine(x, 15, &block->d, &block->dmin, block->scales, q);
  pack_k_quants(q, block->qs, nullptr);
}

void quantize_block_q5_k(const float* x, BlockQ5_K* block) {
  uint8_t q[kQK_K];
  quantize_k_affine(x, 31, &block->d, &block->dmin, block->scales, q);
  pack_k_quants(q, block->qs, block->qh);
}

void quantize_block_q6_k(const float* x, BlockQ6_K* block) {
  float group_scales[kGroups];
  float max_scale = 0.0f;  // signed: the scale of largest magnitude
  for (int g = 0; g < kGroups; ++g) {
    group_scales[g] = fit_symmetric_group(x + 16 * g, 16);
    if (std::fabs(group_scales[g]) > std::fabs(max_scale)) max_scale = group_scales[g];
  }
  // The largest scale maps to int8 -128, the one extra level of the signed range.
  block->d = float_to_half(max_scale / -128);
  const float d = half_to_float(block->d);

  int8_t q[kQK_K];
  int candidate[16];
  for (int g = 0; g < kGroups; ++g) {
    const float* xs = x + 16 * g;
    const int sc0 = d != 0.0f ? round_clamped(group_scales[g] / d, -128, 127) : 0;
    double best_err = std::numeric_limits<double>::infinity();
    for (int sc = std::max(-128, sc0 - 1); sc <= std::min(127, sc0 + 1); ++sc) {
      const float scale = d * static_cast<float>(sc);  // the decoder's product
      double err = 0;
      for (int i = 0; i < 16; ++i) {
        candidate[i] = scale != 0.0f ? round_clamped(xs[i] / scale, -32, 31) : 0;
        const double diff = static_cast<double>(scale * static_cast<float>(candidate[i])) - xs[i];
        err += diff * diff;
      }
      if (err < best_err) {
        best_err = err;
        block->scales[g] = static_cast<int8_t>(sc);
        for (int i = 0; i < 16; ++i) q[16 * g + i] = static_cast<int8_t>(candidate[i]);
      }
    }
  }
  pack_q6_k_quants(q, block->ql, block->qh);
}

}  // namespace llamaserve::quant_internal
