// Device-side decoding of weight matrices in the layout of device_matrix.h.
//
// Every kernel that reads weights (matrix-vector products, dequantization, embedding lookup)
// walks a row in "units": one 16-byte load of quants per thread plus the scales those quants
// need. A unit holds kRuns runs of kRunLen consecutive elements of the row; run k starts at
// element run_base(u, k). Format<T> says, per type:
//
//   kRunLen, kRuns    the unit's shape (kElems = kRunLen * kRuns elements)
//   kHasScale         each run carries a scale: w = scale * q
//   kHasMin           and an additive term:     w = scale * q + min
//   Raw               the unit's loaded registers
//   load(m, row, u)   issues the loads of unit u of `row`
//   run_base(u, k)    the row element of run k's first value
//   decode(raw, u, k, q, scale, min)   q[i] for i < kRunLen, and the run's scale/min
//
// The quantized types also give the two halves of decode separately, for kernels that convert
// the codes their own way (quant_mma.cu, in half precision):
//
//   kCodeBias         q = code - kCodeBias
//   codes(raw, u, k, w)          run k's codes in pair order (pair_order.h): byte b of w[b / 4]
//                                holding element pair_order_byte(b)'s
//   scales(raw, u, scale, min)   every run's scale (and min)
//   code_pairs(raw, u, k, pairs) (4-bit types) run k's codes minus kCodeBias as exact f16 pairs,
//                                pair p holding elements 2p and 2p + 1, straight from the words
//                                of codes (nibble_pairs)
//
// The element orders follow quant/blocks.h exactly (the tests compare against its decoder).
// Everything here also compiles for the host (LS_FORMAT), where loads are plain memcpys: the
// kernel tests run the decoders on the CPU against quant's reference, without a GPU.
#pragma once

#include <cstdint>
#include <cstring>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/device_matrix.h"
#include "backend/cuda/pair_order.h"
#include "core/status.h"
#include "quant/blocks.h"
#include "quant/types.h"

#define LS_FORMAT __host__ __device__ __forceinline__
// #pragma unroll in code that the host compiler also sees (it warns on unknown pragmas).
#if defined(__CUDA_ARCH__)
#define LS_UNROLL _Pragma("unroll")
#else
#define LS_UNROLL
#endif

namespace llamaserve::cuda {

// 16 bytes of weights, not allocated in L1: weights are read once per step and would only
// evict the activations, which every row reads again.
LS_FORMAT uint4 load_weights_16(const uint8_t* p) {
  uint4 r;
#if defined(__CUDA_ARCH__)
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
#else
  std::memcpy(&r, p, sizeof r);
#endif
  return r;
}

// Small loads shared by neighbouring threads (scales): through the read-only cache.
template <typename T>
LS_FORMAT T load_cached(const void* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(static_cast<const T*>(p));
#else
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
#endif
}

LS_FORMAT float half_bits_to_float(uint32_t bits) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits & 0xffffu)));
}

LS_FORMAT float load_half(const uint8_t* p) {
  return half_bits_to_float(load_cached<unsigned short>(p));
}

// __byte_perm: byte n of the result is byte ((s >> 4n) & 7) of the pair (x, y).
LS_FORMAT uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, s);
#else
  const uint64_t bytes = (static_cast<uint64_t>(y) << 32) | x;
  uint32_t r = 0;
  for (int n = 0; n < 4; ++n)
    r |= static_cast<uint32_t>((bytes >> (8 * ((s >> (4 * n)) & 7))) & 0xff) << (8 * n);
  return r;
#endif
}

// Word i of a 16-byte load; i is a compile-time constant after unrolling.
LS_FORMAT uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// Byte k (0..3) of w as a float, minus `bias`. The byte goes into the mantissa of 2^23
// (0x4B000000) and a float subtract removes the 2^23: two full-rate instructions instead of a
// quarter-rate integer-to-float conversion. Exact for every byte and the biases used here.
LS_FORMAT float byte_as_float(uint32_t w, int k, float bias) {
  return bits_to_float(byte_perm(w, 0x4B000000u, 0x7440u | static_cast<uint32_t>(k))) -
         (8388608.0f + bias);
}

// An f16 pair's bits (the low half in the low 16 bits) and back: a register reinterpreted on the
// device (assembling the halves would cost instructions in the decode loops), the halves on the
// host.
LS_FORMAT uint32_t half2_bits(__half2 h) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const uint32_t*>(&h);
#else
  const __half2_raw raw = h;
  return static_cast<uint32_t>(raw.x) | (static_cast<uint32_t>(raw.y) << 16);
#endif
}
LS_FORMAT __half2 bits_half2(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const __half2*>(&bits);
#else
  __half2_raw raw;
  raw.x = static_cast<unsigned short>(bits & 0xffffu);
  raw.y = static_cast<unsigned short>(bits >> 16);
  return __half2(raw);
#endif
}

// Bytes i and j (0..3) of `word` (unsigned) minus `bias`, as an exact f16 pair (byte i in the low
// half): a byte permute puts each byte under the exponent of 1024 (0x6400 | byte = 1024 + byte),
// one subtraction of 1024 + bias leaves byte - bias.
LS_FORMAT __half2 bytes_as_half2(uint32_t word, uint32_t i, uint32_t j, float bias) {
  return __hsub2(bits_half2(byte_perm(word, 0x64646464u, 0x4040u | i | (j << 8))),
                 __float2half2_rn(1024.0f + bias));
}

// 16 codes in pair order (four words) into 16 floats in element order: byte b →
// q[pair_order_byte(b)].
LS_FORMAT void bytes_as_floats(const uint32_t (&w)[4], float bias, float* q) {
  LS_UNROLL
  for (int i = 0; i < 4; ++i) {
    LS_UNROLL
    for (int k = 0; k < 4; ++k) q[pair_order_byte(4 * i + k)] = byte_as_float(w[i], k, bias);
  }
}

LS_FORMAT const uint8_t* quant_row(const DeviceMatrix& m, int64_t row) {
  return m.quants + row * m.quant_row_bytes;
}
LS_FORMAT const uint8_t* scale_row(const DeviceMatrix& m, int64_t row) {
  return m.scales + row * m.scale_row_bytes;
}
// Row `row` of m as a matrix whose row 0 it is: loads from it add only their offset in the row.
LS_FORMAT DeviceMatrix row_view(const DeviceMatrix& m, int64_t row) {
  DeviceMatrix v = m;
  v.quants = quant_row(m, row);
  v.scales = scale_row(m, row);
  return v;
}

template <TensorType T>
struct Format;

// The low (k = 0) or high (k = 1) nibbles of 16 bytes, one a byte.
LS_FORMAT void nibbles(const uint4& q, int k, uint32_t (&w)[4]) {
  const int shift = 4 * k;
  LS_UNROLL
  for (int i = 0; i < 4; ++i) w[i] = (word(q, i) >> shift) & 0x0f0f0f0fu;
}

// A word's bytes between pair order and the GGUF order (pair_order.h: the swap of the middle
// bytes is its own inverse).
LS_FORMAT uint32_t swap_middle_bytes(uint32_t w) { return byte_perm(w, 0, 0x3120u); }

// (w & kMask) | kBits.
template <uint32_t kMask, uint32_t kBits>
LS_FORMAT uint32_t and_or(uint32_t w) {
#if defined(__CUDA_ARCH__)
  // One LOP3 (lookup table 0xea); written as C++ the compiler takes two.
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(r) : "r"(w), "n"(kMask), "n"(kBits));
  return r;
#else
  return (w & kMask) | kBits;
#endif
}

// The four codes of run k (low nibbles k = 0, high k = 1) of a word of 4-bit codes in pair
// order, minus kBias, as two exact f16 pairs: the elements of bytes 0 and 2 in `first`, of bytes 1
// and 3 in `second`. Each nibble goes into the mantissa under an exponent that gives its lowest bit
// the weight 1 (1024 for bits 0..3, 64 for bits 4..7), and one subtraction of that base plus the
// bias leaves the code: a LOP3 and a half2 subtraction a pair, with no byte permute and no shift of
// the high nibbles.
template <int k, int kBias>
LS_FORMAT void nibble_pairs(uint32_t w, __half2& first, __half2& second) {
  static_assert(k == 0 || k == 1);
  static_assert(kBias >= 0 && kBias < 16);
  constexpr uint32_t kMask = k == 0 ? 0x000f000fu : 0x00f000f0u;
  constexpr uint32_t kBaseBits = k == 0 ? 0x64006400u : 0x54005400u;
  // 1024 + b is the base's bits with mantissa b, 64 + b with mantissa 16 b.
  constexpr uint32_t kSubtractBits =
      kBaseBits | static_cast<uint32_t>(kBias) * (k == 0 ? 0x00010001u : 0x00100010u);
  const __half2 subtract = bits_half2(kSubtractBits);
  first = __hsub2(bits_half2(and_or<kMask, kBaseBits>(w)), subtract);
  second = __hsub2(bits_half2(and_or<kMask, kBaseBits>(w >> 8)), subtract);
}

// Run k of four words of 4-bit codes in pair order as exact f16 pairs minus kBias, pair p holding
// elements 2p and 2p + 1 of the run.
template <int kBias>
LS_FORMAT void nibble_run_pairs(const uint4& q, int k, __half2 (&pairs)[8]) {
  LS_UNROLL
  for (int i = 0; i < 4; ++i) {
    if (k == 0) {
      nibble_pairs<0, kBias>(word(q, i), pairs[2 * i], pairs[2 * i + 1]);
    } else {
      nibble_pairs<1, kBias>(word(q, i), pairs[2 * i], pairs[2 * i + 1]);
    }
  }
}

// decode() of a quantized format from its codes() and scales().
template <class F>
LS_FORMAT void decode_codes(const typename F::Raw& raw, int u, int k, float (&q)[F::kRunLen],
                            float& scale, float& min) {
  uint32_t w[4];
  F::codes(raw, u, k, w);
  bytes_as_floats(w, F::kCodeBias, q);
  float scales[F::kRuns], mins[F::kRuns] = {};
  F::scales(raw, u, scales, mins);
  scale = scales[k];
  min = mins[k];
}

template <>
struct Format<TensorType::F32> {
  static constexpr int kRunLen = 4, kRuns = 1;
  static constexpr bool kHasScale = false, kHasMin = false;
  struct Raw {
    uint4 q;
  };
  LS_FORMAT static Raw load(const DeviceMatrix& m, int64_t row, int u) {
    return {load_weights_16(quant_row(m, row) + 16 * u)};
  }
  LS_FORMAT static int run_base(int u, int) { return 4 * u; }
  LS_FORMAT static void decode(const Raw& raw, int, int, float (&q)[kRunLen], float&, float&) {
    LS_UNROLL
    for (int i = 0; i < 4; ++i) q[i] = bits_to_float(word(raw.q, i));
  }
};

template <>
struct Format<TensorType::F16> {
  static constexpr int kRunLen = 8, kRuns = 1;
  static constexpr bool kHasScale = false, kHasMin = false;
  struct Raw {
    uint4 q;
  };
  LS_FORMAT static Raw load(const DeviceMatrix& m, int64_t row, int u) {
    return {load_weights_16(quant_row(m, row) + 16 * u)};
  }
  LS_FORMAT static int run_base(int u, int) { return 8 * u; }
  LS_FORMAT static void decode(const Raw& raw, int, int, float (&q)[kRunLen], float&, float&) {
    LS_UNROLL
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = word(raw.q, i);
      q[2 * i] = half_bits_to_float(w);
      q[2 * i + 1] = half_bits_to_float(w >> 16);
    }
  }
};

template <>
struct Format<TensorType::BF16> {
  static constexpr int kRunLen = 8, kRuns = 1;
  static constexpr bool kHasScale = false, kHasMin = false;
  struct Raw {
    uint4 q;
  };
  LS_FORMAT static Raw load(const DeviceMatrix& m, int64_t row, int u) {
    return {load_weights_16(quant_row(m, row) + 16 * u)};
  }
  LS_FORMAT static int run_base(int u, int) { return 8 * u; }
  LS_FORMAT static void decode(const Raw& raw, int, int, float (&q)[kRunLen], float&, float&) {
    LS_UNROLL
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = word(raw.q, i);
      q[2 * i] = bits_to_float(w << 16);
      q[2 * i + 1] = bits_to_float(w & 0xffff0000u);
    }
  }
};

// Unit = half a block (16 codes); the two halves of block b are units 2b and 2b + 1.
template <>
struct Format<TensorType::Q8_0> {
  static constexpr int kRunLen = 16, kRuns = 1;
  static constexpr bool kHasScale = true, kHasMin = false;
  struct Raw {
    uint4 q;
    float d;
  };
  LS_FORMAT static Raw load(const DeviceMatrix& m, int64_t row, int u) {
    return {load_weights_16(quant_row(m, row) + 16 * u),
            load_half(scale_row(m, row) + 2 * (u >> 1))};
  }
  LS_FORMAT static int run_base(int u, int) { return 16 * u; }
  // Flipping the sign bit maps int8 c to the byte c + 128.
  static constexpr float kCodeBias = 128.0f;
  LS_FORMAT static void codes(const Raw& raw, int, int, uint32_t (&w)[4]) {
    LS_UNROLL
    for (int i = 0; i < 4; ++i) w[i] = word(raw.q, i) ^ 0x80808080u;
  }
  LS_FORMAT static void scales(const Raw& raw, int, float (&scale)[kRuns], float (&)[kRuns]) {
    scale[0] = raw.d;
  }
  LS_FORMAT static void decode(const Raw& raw, int u, int k, float (&q)[kRunLen], float& scale,
                               float& min) {
    decode_codes<Format>(raw, u, k, q, scale, min);
  }
};

// Unit = one block: byte pair_order_byte(j) holds element j (low nibble) and element j + 16
// (high nibble).
template <>
struct Format<TensorType::Q4_0> {
  static constexpr int kRunLen = 16, kRuns = 2;
  static constexpr bool kHasScale = true, kHasMin = false;
  struct Raw {
    uint4 q;
    float d;
  };
  LS_FORMAT static Raw load(const DeviceMatrix& m, int64_t row, int u) {
    return {load_weights_16(quant_row(m, row) + 16 * u), load_half(scale_row(m, row) + 2 * u)};
  }
  LS_FORMAT static int run_base(int u, int k) { return 32 * u + 16 * k; }
  static constexpr float kCodeBias = 8.0f;
  LS_FORMAT static void codes(const Raw& raw, int, int k, uint32_t (&w)[4]) {
    nibbles(raw.q, k, w);
  }
  LS_FORMAT static void code_pairs(const Raw& raw, int, int k, __half2 (&pairs)[8]) {
    nibble_run_pairs<8>(raw.q, k, pairs);
  }
  LS_FORMAT static void scales(const Raw& raw, int, float (&scale)[kRuns], float (&)[kRuns]) {
    scale[0] = scale[1] = raw.d;
  }
  LS_FORMAT static void decode(const Raw& raw, int u, int k, float (&q)[kRunLen], float& scale,
                               float& min) {
    decode_codes<Format>(raw, u, k, q, scale, min);
  }
};

// As Q4_0, with w = d·q + m.
template <>
struct Format<TensorType::Q4_1> {
  static constexpr int kRunLen = 16, kRuns = 2;
  static constexpr bool kHasScale = true, kHasMin = true;
  struct Raw {
    uint4 q;
    uint32_t dm;  // half d (low), half m (high)
  };
  LS_FORMAT static Raw load(const DeviceMatrix& m, int64_t row, int u) {
    return {load_weights_16(quant_row(m, row) + 16 * u),
            load_cached<uint32_t>(scale_row(m, row) + 4 * u)};
  }
  LS_FORMAT static int run_base(int u, int k) { return 32 * u + 16 * k; }
  static constexpr float kCodeBias = 0.0f;
  LS_FORMAT static void codes(const Raw& raw, int, int k, uint32_t (&w)[4]) {
    nibbles(raw.q, k, w);
  }
  LS_FORMAT static void code_pairs(const Raw& raw, int, int k, __half2 (&pairs)[8]) {
    nibble_run_pairs<0>(raw.q, k, pairs);
  }
  LS_FORMAT static void scales(const Raw& raw, int, float (&scale)[kRuns], float (&min)[kRuns]) {
    scale[0] = scale[1] = half_bits_to_float(raw.dm);
    min[0] = min[1] = half_bits_to_float(raw.dm >> 16);
  }
  LS_FORMAT static void decode(const Raw& raw, int u, int k, float (&q)[kRunLen], float& scale,
                               float& min) {
    decode_codes<Format>(raw, u, k, q, scale, min);
  }
};

// The 6-bit scales and mins of a Q4_K/Q5_K super-block's sub-blocks 0..3 (high = false) or
// 4..7, one a byte, from its first 16 bytes (d, dmin, 12 packed scale bytes), as in
// q4_k_scale_min.
LS_FORMAT void k_quant_scale_bytes(const uint4& meta, bool high, uint32_t& sc, uint32_t& m) {
  // Sub-blocks 0..3: bytes 0..3 / 4..7. Sub-blocks 4..7: low 4 bits in bytes 8..11, high 2 bits
  // in the top of bytes 0..7.
  sc = high ? (meta.w & 0x0f0f0f0fu) | ((meta.y >> 2) & 0x30303030u) : meta.y & 0x3f3f3f3fu;
  m = high ? ((meta.w >> 4) & 0x0f0f0f0fu) | ((meta.z >> 2) & 0x30303030u) : meta.z & 0x3f3f3f3fu;
}

// The scales and mins of sub-blocks 2c and 2c + 1 of a Q4_K/Q5_K super-block. Both encodings
// are computed and one selected, since c differs between the lanes of a warp.
LS_FORMAT void k_quant_scales(const uint4& meta, int c, float (&scale)[2], float (&min)[2]) {
  uint32_t sc, m;
  k_quant_scale_bytes(meta, c >= 2, sc, m);
  const int shift = 16 * (c & 1);
  sc >>= shift;
  m >>= shift;
  const float d = half_bits_to_float(meta.x);
  const float dmin = half_bits_to_float(meta.x >> 16);
  scale[0] = d * byte_as_float(sc, 0, 0.0f);
  scale[1] = d * byte_as_float(sc, 1, 0.0f);
  min[0] = -dmin * byte_as_float(m, 0, 0.0f);
  min[1] = -dmin * byte_as_float(m, 1, 0.0f);
}

// Unit u of a row: super-block u / 8, quant chunk c = (u / 2) % 4 (32 bytes holding sub-block
// 2c in the low nibbles and 2c + 1 in the high nibbles), half h = u % 2 of that chunk; the codes
// from byte kQ4KCodeOffset of a super-block.
inline constexpr int kQ4KCodeOffset = 16;
template <>
struct Format<TensorType::Q4_K> {
  static constexpr int kRunLen = 16, kRuns = 2;
  static constexpr bool kHasScale = true, kHasMin = true;
  static constexpr int kBlockBytes = 144;
  struct Raw {
    uint4 meta;
    uint4 q;
  };
  LS_FORMAT static Raw load(const DeviceMatrix& m, int64_t row, int u) {
    const uint8_t* block = quant_row(m, row) + (u >> 3) * kBlockBytes;
    return {load_cached<uint4>(block), load_weights_16(block + kQ4KCodeOffset + 16 * (u & 7))};
  }
  LS_FORMAT static int run_base(int u, int k) {
    return 256 * (u >> 3) + 64 * ((u >> 1) & 3) + 32 * k + 16 * (u & 1);
  }
  static constexpr float kCodeBias = 0.0f;
  LS_FORMAT static void codes(const Raw& raw, int, int k, uint32_t (&w)[4]) {
    nibbles(raw.q, k, w);
  }
  LS_FORMAT static void code_pairs(const Raw& raw, int, int k, __half2 (&pairs)[8]) {
    nibble_run_pairs<0>(raw.q, k, pairs);
  }
  LS_FORMAT static void scales(const Raw& raw, int u, float (&scale)[kRuns], float (&min)[kRuns]) {
    k_quant_scales(raw.meta, (u >> 1) & 3, scale, min);
  }
  LS_FORMAT static void decode(const Raw& raw, int u, int k, float (&q)[kRunLen], float& scale,
                               float& min) {
    decode_codes<Format>(raw, u, k, q, scale, min);
  }
};

// As Q4_K, plus bit 4 of element l of sub-block j in bit j of qh[l] (qh at byte 16, qs at 48).
template <>
struct Format<TensorType::Q5_K> {
  static constexpr int kRunLen = 16, kRuns = 2;
  static constexpr bool kHasScale = true, kHasMin = true;
  static constexpr int kBlockBytes = 176;
  struct Raw {
    uint4 meta;
    uint4 qh;
    uint4 q;
  };
  LS_FORMAT static Raw load(const DeviceMatrix& m, int64_t row, int u) {
    const uint8_t* block = quant_row(m, row) + (u >> 3) * kBlockBytes;
    return {load_cached<uint4>(block), load_cached<uint4>(block + 16 + 16 * (u & 1)),
            load_weights_16(block + 48 + 16 * (u & 7))};
  }
  LS_FORMAT static int run_base(int u, int k) { return Format<TensorType::Q4_K>::run_base(u, k); }
  static constexpr float kCodeBias = 0.0f;
  LS_FORMAT static void codes(const Raw& raw, int u, int k, uint32_t (&w)[4]) {
    const int shift = 4 * k;
    // Bit (2c + k) of each qh byte, moved to bit 4.
    const int high_shift = 2 * ((u >> 1) & 3) + k;
    LS_UNROLL
    for (int i = 0; i < 4; ++i) {
      w[i] = ((word(raw.q, i) >> shift) & 0x0f0f0f0fu) |
             (((word(raw.qh, i) >> high_shift) << 4) & 0x10101010u);
    }
  }
  LS_FORMAT static void scales(const Raw& raw, int u, float (&scale)[kRuns], float (&min)[kRuns]) {
    k_quant_scales(raw.meta, (u >> 1) & 3, scale, min);
  }
  LS_FORMAT static void decode(const Raw& raw, int u, int k, float (&q)[kRunLen], float& scale,
                               float& min) {
    decode_codes<Format>(raw, u, k, q, scale, min);
  }
};

// Four Q6_K codes from their ql bytes and their qh bytes shifted right by 2s: quarter s (k = 0:
// low nibbles, qh bits 2s..2s+1) or quarter s + 2 (k = 1: high nibbles, bits 2s+4..2s+5).
LS_FORMAT uint32_t q6_k_codes(uint32_t ql, uint32_t qh, int k) {
  return k == 0 ? (ql & 0x0f0f0f0fu) | ((qh << 4) & 0x30303030u)
                : ((ql >> 4) & 0x0f0f0f0fu) | (qh & 0x30303030u);
}

// Device block: ql (128 bytes), qh (64), scales (16); d in the scale array. Unit u of a row:
// super-block u / 8, r = u % 8: half hf = r / 4 (128 elements), ql chunk s = (r / 2) % 2,
// l-half h = r % 2. Its 16 ql bytes hold quarter s (low nibbles) and quarter s + 2 (high
// nibbles) of the half for l in [16h, 16h + 16); its qh bytes hold their top two bits.
template <>
struct Format<TensorType::Q6_K> {
  static constexpr int kRunLen = 16, kRuns = 2;
  static constexpr bool kHasScale = true, kHasMin = false;
  static constexpr int kBlockBytes = 208;
  struct Raw {
    uint4 ql;
    uint4 qh;
    int8_t sc[2];
    float d;
  };
  LS_FORMAT static Raw load(const DeviceMatrix& m, int64_t row, int u) {
    const int r = u & 7;
    const int hf = r >> 2, s = (r >> 1) & 1, h = r & 1;
    const uint8_t* block = quant_row(m, row) + (u >> 3) * kBlockBytes;
    Raw raw;
    raw.ql = load_weights_16(block + 64 * hf + 32 * s + 16 * h);
    raw.qh = load_weights_16(block + 128 + 32 * hf + 16 * h);
    // Scale groups of 16 elements: 8 hf + 2 quarter + h.
    const int8_t* scales = reinterpret_cast<const int8_t*>(block + 192);
    raw.sc[0] = load_cached<int8_t>(scales + 8 * hf + 2 * s + h);
    raw.sc[1] = load_cached<int8_t>(scales + 8 * hf + 2 * (s + 2) + h);
    raw.d = load_half(scale_row(m, row) + 2 * (u >> 3));
    return raw;
  }
  LS_FORMAT static int run_base(int u, int k) {
    const int r = u & 7;
    return 256 * (u >> 3) + 128 * (r >> 2) + 32 * ((r >> 1) & 1) + 64 * k + 16 * (r & 1);
  }
  static constexpr float kCodeBias = 32.0f;
  LS_FORMAT static void codes(const Raw& raw, int u, int k, uint32_t (&w)[4]) {
    const int s = (u >> 1) & 1;
    LS_UNROLL
    for (int i = 0; i < 4; ++i) {
      w[i] = q6_k_codes(word(raw.ql, i), word(raw.qh, i) >> (2 * s), k);
    }
  }
  LS_FORMAT static void scales(const Raw& raw, int, float (&scale)[kRuns], float (&)[kRuns]) {
    scale[0] = raw.d * static_cast<float>(raw.sc[0]);
    scale[1] = raw.d * static_cast<float>(raw.sc[1]);
  }
  LS_FORMAT static void decode(const Raw& raw, int u, int k, float (&q)[kRunLen], float& scale,
                               float& min) {
    decode_codes<Format>(raw, u, k, q, scale, min);
  }
};

// Applies a decoded run's scale and min: the weights themselves.
template <class F>
LS_FORMAT void dequantize_run(float (&q)[F::kRunLen], float scale, float min) {
  LS_UNROLL
  for (int i = 0; i < F::kRunLen; ++i) {
    if constexpr (F::kHasMin) {
      q[i] = fmaf(scale, q[i], min);
    } else if constexpr (F::kHasScale) {
      q[i] *= scale;
    }
  }
}

// Returns fn.template operator()<T>() (a Status) for the runtime `type`, or an error naming
// `op` and the type when no kernel exists. The one place that maps runtime weight types to
// the templates above.
template <class Fn>
Status dispatch_weight_type(TensorType type, const char* op, Fn&& fn) {
  switch (type) {
    case TensorType::F32: return fn.template operator()<TensorType::F32>();
    case TensorType::F16: return fn.template operator()<TensorType::F16>();
    case TensorType::BF16: return fn.template operator()<TensorType::BF16>();
    case TensorType::Q8_0: return fn.template operator()<TensorType::Q8_0>();
    case TensorType::Q4_0: return fn.template operator()<TensorType::Q4_0>();
    case TensorType::Q4_1: return fn.template operator()<TensorType::Q4_1>();
    case TensorType::Q4_K: return fn.template operator()<TensorType::Q4_K>();
    case TensorType::Q5_K: return fn.template operator()<TensorType::Q5_K>();
    case TensorType::Q6_K: return fn.template operator()<TensorType::Q6_K>();
    default: return unsupported_weight_type(type, op);
  }
}

template <TensorType T>
inline constexpr int kUnitElems = Format<T>::kRunLen* Format<T>::kRuns;

}  // namespace llamaserve::cuda
