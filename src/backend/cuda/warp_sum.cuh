// Sums of many values across a warp at once (the matvec's row sums, decode attention's scores).
#pragma once

namespace llamaserve::cuda {

__host__ __device__ constexpr int next_pow2_int(int n) {
  return n <= 1 ? 1 : 2 * next_pow2_int((n + 1) / 2);
}

// Sums P values across the warp (P a power of two <= 32); lane L returns the total of value
// L >> (5 - log2 P). Each halving step trades half of the values with the partner lane, so
// every lane ends with one value summed over the lanes that differ in the traded bits; the
// remaining low lane bits are summed with plain shuffles.
template <int P>
__device__ __forceinline__ float warp_transpose_sum(float (&v)[P], int lane) {
  int offset = 16;
#pragma unroll
  for (int n = P; n > 1; n /= 2, offset /= 2) {
    const bool upper = (lane & offset) != 0;
#pragma unroll
    for (int i = 0; i < n / 2; ++i) {
      const float send = upper ? v[i] : v[i + n / 2];
      const float keep = upper ? v[i + n / 2] : v[i];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, send, offset);
    }
  }
  float s = v[0];
#pragma unroll
  for (; offset > 0; offset /= 2) s += __shfl_xor_sync(0xffffffffu, s, offset);
  return s;
}

// log2 of a power of two.
__host__ __device__ constexpr int log2_pow2_int(int n) {
  return n <= 1 ? 0 : 1 + log2_pow2_int(n / 2);
}

// Every lane ends with the warp sums of all N values of v (N <= 32): the transposing butterfly
// (one shuffle a value of the next power of two, then one for each lane bit it leaves) and one
// shuffle a value to hand each sum back: for 16 values 32 shuffles instead of 80.
template <int N>
__device__ __forceinline__ void warp_sum_all(float (&v)[N], int lane) {
  constexpr int kPadded = next_pow2_int(N);
  static_assert(kPadded <= 32);
  float padded[kPadded];
#pragma unroll
  for (int i = 0; i < kPadded; ++i) padded[i] = i < N ? v[i] : 0.0f;
  const float sum = warp_transpose_sum<kPadded>(padded, lane);
#pragma unroll
  for (int i = 0; i < N; ++i) {
    v[i] = __shfl_sync(0xffffffffu, sum, i << (5 - log2_pow2_int(kPadded)));
  }
}

}  // namespace llamaserve::cuda
