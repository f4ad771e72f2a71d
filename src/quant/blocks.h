// On-disk block layouts of the GGUF tensor types (identical to ggml's), half-precision
// conversions, and the decode of one block or one element group.
//
// Included by host code (g++) and CUDA kernels (nvcc) alike, so every function here is
// LS_HOST_DEVICE and the header uses no host-only library. CUDA kernels should decode with
// these functions rather than re-deriving the bit layout.
//
// Bit-exactness: the host reference (quant.cc) is built with -ffp-contract=off, so its floats
// equal ggml's and gguf-py's reference dequantizers bit for bit. Code that inlines these
// functions with FMA contraction enabled (nvcc by default) may differ in the last bit of
// `d * q - m`.
#pragma once

#include <cstdint>
#if !defined(__CUDA_ARCH__)
#include <cstring>
#endif

#if defined(__CUDACC__)
#define LS_HOST_DEVICE __host__ __device__
#else
#define LS_HOST_DEVICE
#endif

namespace llamaserve {

// IEEE 754 binary16, stored as its bits. A struct (not uint16_t) so that it cannot be
// mistaken for an integer in arithmetic.
struct Half {
  uint16_t bits;
};

// bfloat16: the upper 16 bits of a binary32.
struct BF16 {
  uint16_t bits;
};

static_assert(sizeof(Half) == 2 && alignof(Half) == 2);
static_assert(sizeof(BF16) == 2 && alignof(BF16) == 2);

LS_HOST_DEVICE inline uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

LS_HOST_DEVICE inline float bits_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// Exact: every binary16 value is a binary32 value.
LS_HOST_DEVICE inline float half_to_float(Half h) {
#if defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
  return f;
#else
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1fu;
  const uint32_t mantissa = h.bits & 0x3ffu;
  if (exponent == 0x1f) return bits_to_float(sign | 0x7f800000u | (mantissa << 13));  // inf, nan
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in binary32.
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  return bits_to_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
#endif
}

// Round to nearest, ties to even (what F16C, CUDA and numpy do). Overflow gives inf; a nan
// stays a nan (quieted, top payload bits kept).
LS_HOST_DEVICE inline Half float_to_half(float f) {
#if defined(__CUDA_ARCH__)
  uint16_t bits;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(f));
  return Half{bits};
#else
  const uint32_t u = float_to_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs_bits = u & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) {
    return Half{static_cast<uint16_t>(sign | 0x7e00u | ((abs_bits >> 13) & 0x3ffu))};
  }
  // 0x477ff000 is 65520, halfway between 65504 (largest half) and 65536; the tie rounds to
  // the even neighbour, which is infinity.
  if (abs_bits >= 0x477ff000u) return Half{static_cast<uint16_t>(sign | 0x7c00u)};
  const uint32_t exponent = abs_bits >> 23;
  if (exponent < 113) {
    // Result is a half subnormal (or zero): round value / 2^-24 to an integer. A carry into
    // bit 10 correctly produces the smallest normal.
    if (exponent < 102) return Half{static_cast<uint16_t>(sign)};  // below 2^-25: zero
    const uint32_t mantissa = (abs_bits & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // 14..24
    uint32_t rounded = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (rounded & 1u))) ++rounded;
    return Half{static_cast<uint16_t>(sign | rounded)};
  }
  uint32_t rounded = ((exponent - 112) << 10) | ((abs_bits >> 13) & 0x3ffu);
  const uint32_t rest = abs_bits & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (rounded & 1u))) ++rounded;  // carry may bump exponent
  return Half{static_cast<uint16_t>(sign | rounded)};
#endif
}

LS_HOST_DEVICE inline float bf16_to_float(BF16 h) {
  return bits_to_float(static_cast<uint32_t>(h.bits) << 16);
}

// Round to nearest, ties to even; a nan is forced quiet (as ggml does) so truncation cannot
// turn it into an infinity.
LS_HOST_DEVICE inline BF16 float_to_bf16(float f) {
  const uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return BF16{static_cast<uint16_t>((u >> 16) | 0x40u)};
  return BF16{static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}

// ---------------------------------------------------------------------------------------
// Block layouts. Element i of a row lives in block i / kQK*, at index i % kQK* of the
// element order each decode function below defines.

constexpr int kQK8_0 = 32;
constexpr int kQK4_0 = 32;
constexpr int kQK4_1 = 32;
constexpr int kQK_K = 256;        // super-block of the K-quants
constexpr int kKScaleBytes = 12;  // 8 six-bit scales + 8 six-bit mins of Q4_K / Q5_K

// x[i] = d * qs[i]
struct BlockQ8_0 {
  Half d;
  int8_t qs[kQK8_0];
};

// x[i] = d * (q[i] - 8). Byte j holds q[j] in its low nibble and q[j + 16] in its high nibble.
struct BlockQ4_0 {
  Half d;
  uint8_t qs[kQK4_0 / 2];
};

// x[i] = d * q[i] + m, nibbles as in Q4_0.
struct BlockQ4_1 {
  Half d;
  Half m;
  uint8_t qs[kQK4_1 / 2];
};

// 8 sub-blocks of 32; sub-block j: x = (d * sc[j]) * q - (dmin * m[j]), q in [0, 15],
// sc/m 6-bit (packing: see q4_k_scale_min). qs: 4 chunks of 32 bytes; chunk c holds
// sub-block 2c in the low nibbles and sub-block 2c + 1 in the high nibbles.
struct BlockQ4_K {
  Half d;
  Half dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQK_K / 2];
};

// As Q4_K with a fifth bit: q in [0, 31]; bit 4 of sub-block j's element l is bit j of qh[l].
struct BlockQ5_K {
  Half d;
  Half dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};

// 16 groups of 16; group g: x = (d * scales[g]) * (q - 32), q in [0, 63]. The low 4 bits of q
// live in ql, the high 2 bits in qh (layout: see q6_k_quant).
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  Half d;
};

static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);

// ---------------------------------------------------------------------------------------
// Legacy 32-element blocks.

LS_HOST_DEVICE inline void dequantize_block_q8_0(const BlockQ8_0& block, float* y) {
  const float d = half_to_float(block.d);
  for (int i = 0; i < kQK8_0; ++i) y[i] = static_cast<float>(block.qs[i]) * d;
}

// Element i (0..31) of a Q4_0/Q4_1 block, as the unsigned nibble.
LS_HOST_DEVICE inline int q4_nibble(const uint8_t* qs, int i) {
  return i < 16 ? (qs[i] & 0x0f) : (qs[i - 16] >> 4);
}

LS_HOST_DEVICE inline void dequantize_block_q4_0(const BlockQ4_0& block, float* y) {
  const float d = half_to_float(block.d);
  for (int i = 0; i < kQK4_0; ++i) y[i] = static_cast<float>(q4_nibble(block.qs, i) - 8) * d;
}

LS_HOST_DEVICE inline void dequantize_block_q4_1(const BlockQ4_1& block, float* y) {
  const float d = half_to_float(block.d);
  const float m = half_to_float(block.m);
  for (int i = 0; i < kQK4_1; ++i) y[i] = static_cast<float>(q4_nibble(block.qs, i)) * d + m;
}

// ---------------------------------------------------------------------------------------
// Q4_K / Q5_K.

// Unpacks the 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes:
//   bytes 0..3:  low 6 bits = sc[0..3], top 2 bits = high bits of sc[4..7]
//   bytes 4..7:  low 6 bits = m[0..3],  top 2 bits = high bits of m[4..7]
//   bytes 8..11: low nibble = low 4 bits of sc[4..7], high nibble = low 4 bits of m[4..7]
LS_HOST_DEVICE inline void q4_k_scale_min(int j, const uint8_t* scales, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

// The 4-bit part of element i (0..255) of a Q4_K/Q5_K super-block.
LS_HOST_DEVICE inline int k_low_nibble(const uint8_t* qs, int i) {
  const int chunk = i / 64;
  const int within = i % 64;
  const uint8_t byte = qs[chunk * 32 + within % 32];
  return within < 32 ? (byte & 0x0f) : (byte >> 4);
}

LS_HOST_DEVICE inline int q4_k_quant(const BlockQ4_K& block, int i) {
  return k_low_nibble(block.qs, i);
}

LS_HOST_DEVICE inline int q5_k_quant(const BlockQ5_K& block, int i) {
  const int sub_block = i / 32;
  const int high_bit = (block.qh[i % 32] >> sub_block) & 1;
  return k_low_nibble(block.qs, i) | (high_bit << 4);
}

// Elements [32 * j, 32 * j + 32) of a Q4_K super-block into y[0..31].
LS_HOST_DEVICE inline void dequantize_q4_k_sub_block(const BlockQ4_K& block, int j, float* y) {
  uint8_t sc, m;
  q4_k_scale_min(j, block.scales, &sc, &m);
  const float d = half_to_float(block.d) * static_cast<float>(sc);
  const float min = half_to_float(block.dmin) * static_cast<float>(m);
  for (int l = 0; l < 32; ++l) {
    y[l] = d * static_cast<float>(q4_k_quant(block, 32 * j + l)) - min;
  }
}

LS_HOST_DEVICE inline void dequantize_q5_k_sub_block(const BlockQ5_K& block, int j, float* y) {
  uint8_t sc, m;
  q4_k_scale_min(j, block.scales, &sc, &m);
  const float d = half_to_float(block.d) * static_cast<float>(sc);
  const float min = half_to_float(block.dmin) * static_cast<float>(m);
  for (int l = 0; l < 32; ++l) {
    y[l] = d * static_cast<float>(q5_k_quant(block, 32 * j + l)) - min;
  }
}

LS_HOST_DEVICE inline void dequantize_block_q4_k(const BlockQ4_K& block, float* y) {
  for (int j = 0; j < kQK_K / 32; ++j) dequantize_q4_k_sub_block(block, j, y + 32 * j);
}

LS_HOST_DEVICE inline void dequantize_block_q5_k(const BlockQ5_K& block, float* y) {
  for (int j = 0; j < kQK_K / 32; ++j) dequantize_q5_k_sub_block(block, j, y + 32 * j);
}

// ---------------------------------------------------------------------------------------
// Q6_K.

// q - 32 for element i (0..255). Each half (128 elements) uses 64 bytes of ql and 32 of qh;
// within a half, element r = 32 * quarter + l takes
//   low 4 bits:  ql[l + 32 * (quarter & 1)], low nibble for quarters 0-1, high for 2-3
//   high 2 bits: qh[l] >> (2 * quarter)
LS_HOST_DEVICE inline int q6_k_quant(const BlockQ6_K& block, int i) {
  const int half = i / 128;
  const int quarter = (i % 128) / 32;
  const int l = i % 32;
  const uint8_t low_byte = block.ql[64 * half + l + 32 * (quarter & 1)];
  const int low = quarter < 2 ? (low_byte & 0x0f) : (low_byte >> 4);
  const int high = (block.qh[32 * half + l] >> (2 * quarter)) & 3;
  return (low | (high << 4)) - 32;
}

// Elements [16 * g, 16 * g + 16) of a Q6_K super-block (the ones sharing scales[g]).
LS_HOST_DEVICE inline void dequantize_q6_k_group(const BlockQ6_K& block, int g, float* y) {
  const float d = half_to_float(block.d) * static_cast<float>(block.scales[g]);
  for (int l = 0; l < 16; ++l) y[l] = d * static_cast<float>(q6_k_quant(block, 16 * g + l));
}

LS_HOST_DEVICE inline void dequantize_block_q6_k(const BlockQ6_K& block, float* y) {
  for (int g = 0; g < kQK_K / 16; ++g) dequantize_q6_k_group(block, g, y + 16 * g);
}

}  // namespace llamaserve
