// Per weight type, the dot product of one "item" of a weight row with the matching elements of
// one activation row: the inner step of the matvec kernel (matvec_kernel.cuh).
//
// Quantized types multiply integer codes with the 8-bit activation blocks of act_quant.h by
// dp4a (four int8 products summed into an int32 per instruction) and apply the weight and
// activation scales once per block of 16 or 32 elements; nothing is converted to float per
// element. Float types (F32/F16/BF16) multiply fp32 activations in fp32.
//
// An item is what one thread reads per step: 16 to 48 bytes of quants in 16-byte loads plus
// the scales they need, covering kItemElems consecutive (or, for Q6_K, interleaved) elements.
// DotFormat<T> says, per type:
//
//   kItemElems                elements per item; items per row = cols / kItemElems
//   Raw  load(m, row, i)      issues the loads of item i of `row`
//   Decoded decode(raw, i)    the item unpacked for the products (once for all activation rows)
//   Act  load_act(x, i)       the activation elements item i meets, from one activation row
//   float dot(decoded, act)   Σ w·x over the item
//
// The weight layouts are those of device_matrix.h, element orders as quant/blocks.h except that
// the codes of weights and 8-bit activations alike are in pair order (pair_order.h), so each
// dp4a multiplies bytes of the same elements; everything compiles for the host too
// (formats.cuh's LS_FORMAT), where a test checks each type's items against the reference decoder
// without a GPU.
#pragma once

#include <type_traits>

#include "backend/cuda/act_quant.h"
#include "backend/cuda/formats.cuh"

namespace llamaserve::cuda {

// Σ_k a.byte[k] · b.byte[k] + c, the bytes of b signed, those of a signed (AByte int8_t) or
// unsigned (uint8_t).
template <class AByte = int8_t>
LS_FORMAT int dp4a(uint32_t a, uint32_t b, int c) {
  static_assert(std::is_same_v<AByte, int8_t> || std::is_same_v<AByte, uint8_t>);
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<AByte, uint8_t>) {
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
  } else {
    return __dp4a(static_cast<int>(a), static_cast<int>(b), c);
  }
#else
  for (int k = 0; k < 4; ++k) {
    c += static_cast<int>(static_cast<AByte>(a >> (8 * k))) *
         static_cast<int>(static_cast<int8_t>(b >> (8 * k)));
  }
  return c;
#endif
}

// 16 activation codes: read by every row of the block, so through the read-only cache.
LS_FORMAT uint4 load_act_16(const int8_t* p) { return load_cached<uint4>(p); }

// Σ of dp4a over four words (the bytes of w as AByte).
template <class AByte = int8_t>
LS_FORMAT int dot_words(const uint32_t (&w)[4], const uint4& a, int c) {
  c = dp4a<AByte>(w[0], a.x, c);
  c = dp4a<AByte>(w[1], a.y, c);
  c = dp4a<AByte>(w[2], a.z, c);
  return dp4a<AByte>(w[3], a.w, c);
}

LS_FORMAT void low_nibbles(const uint4& q, uint32_t (&out)[4]) {
  out[0] = q.x & 0x0f0f0f0fu;
  out[1] = q.y & 0x0f0f0f0fu;
  out[2] = q.z & 0x0f0f0f0fu;
  out[3] = q.w & 0x0f0f0f0fu;
}
LS_FORMAT void high_nibbles(const uint4& q, uint32_t (&out)[4]) {
  out[0] = (q.x >> 4) & 0x0f0f0f0fu;
  out[1] = (q.y >> 4) & 0x0f0f0f0fu;
  out[2] = (q.z >> 4) & 0x0f0f0f0fu;
  out[3] = (q.w >> 4) & 0x0f0f0f0fu;
}

// Pointers of one activation row.
struct Q8Row {
  const int8_t* qs;
  const float4* ds;
};
LS_FORMAT Q8Row q8_row(const Q8Rows& rows, int b) {
  return {rows.qs + b * rows.qs_stride, rows.ds + b * rows.ds_stride};
}

template <TensorType T>
struct DotFormat;

// ---------------------------------------------------------------------------------------
// Integer formats.

// Item = one block (32 codes in two loads) and its half scale.
template <>
struct DotFormat<TensorType::Q8_0> {
  static constexpr bool kQ8 = true;
  static constexpr int kItemElems = 32;
  struct Raw {
    uint4 q0, q1;
    float d;
  };
  using Decoded = Raw;
  struct Act {
    uint4 a0, a1;
    float d;
  };
  LS_FORMAT static Raw load(const DeviceMatrix& m, int64_t row, int i) {
    const uint8_t* q = quant_row(m, row) + 32 * i;
    return {load_weights_16(q), load_weights_16(q + 16), load_half(scale_row(m, row) + 2 * i)};
  }
  LS_FORMAT static Decoded decode(const Raw& raw, int) { return raw; }
  LS_FORMAT static Act load_act(const Q8Row& x, int i) {
    return {load_act_16(x.qs + 32 * i), load_act_16(x.qs + 32 * i + 16),
            load_cached<float>(x.ds + i)};
  }
  LS_FORMAT static float dot(const Decoded& w, const Act& x) {
    const uint32_t w0[4] = {w.q0.x, w.q0.y, w.q0.z, w.q0.w};
    const uint32_t w1[4] = {w.q1.x, w.q1.y, w.q1.z, w.q1.w};
    const int s = dot_words(w1, x.a1, dot_words(w0, x.a0, 0));
    return w.d * x.d * static_cast<float>(s);
  }
};

// Item = one block: byte j holds element j (low nibble) and j + 16 (high nibble), code - 8.
template <>
struct DotFormat<TensorType::Q4_0> {
  static constexpr bool kQ8 = true;
  static constexpr int kItemElems = 32;
  struct Raw {
    uint4 q;
    float d;
  };
  struct Decoded {
    uint32_t lo[4], hi[4];
    float d;
  };
  struct Act {
    uint4 a0, a1;  // elements 0..15, 16..31
    float d, sum;
  };
  LS_FORMAT static Raw load(const DeviceMatrix& m, int64_t row, int i) {
    return {load_weights_16(quant_row(m, row) + 16 * i), load_half(scale_row(m, row) + 2 * i)};
  }
  LS_FORMAT static Decoded decode(const Raw& raw, int) {
    Decoded w;
    low_nibbles(raw.q, w.lo);
    high_nibbles(raw.q, w.hi);
    w.d = raw.d;
    return w;
  }
  LS_FORMAT static Act load_act(const Q8Row& x, int i) {
    const float2 ds = load_cached<float2>(x.ds + i);
    return {load_act_16(x.qs + 32 * i), load_act_16(x.qs + 32 * i + 16), ds.x, ds.y};
  }
  LS_FORMAT static float dot(const Decoded& w, const Act& x) {
    const int s = dot_words(w.hi, x.a1, dot_words(w.lo, x.a0, 0));
    return w.d * fmaf(x.d, static_cast<float>(s), -8.0f * x.sum);
  }
};

// As Q4_0 with w = d·q + m.
template <>
struct DotFormat<TensorType::Q4_1> {
  static constexpr bool kQ8 = true;
  static constexpr int kItemElems = 32;
  struct Raw {
    uint4 q;
    uint32_t dm;
  };
  struct Decoded {
    uint32_t lo[4], hi[4];
    float d, m;
  };
  using Act = DotFormat<TensorType::Q4_0>::Act;
  LS_FORMAT static Raw load(const DeviceMatrix& m, int64_t row, int i) {
    return {load_weights_16(quant_row(m, row) + 16 * i),
            load_cached<uint32_t>(scale_row(m, row) + 4 * i)};
  }
  LS_FORMAT static Decoded decode(const Raw& raw, int) {
    Decoded w;
    low_nibbles(raw.q, w.lo);
    high_nibbles(raw.q, w.hi);
    w.d = half_bits_to_float(raw.dm);
    w.m = half_bits_to_float(raw.dm >> 16);
    return w;
  }
  LS_FORMAT static Act load_act(const Q8Row& x, int i) {
    return DotFormat<TensorType::Q4_0>::load_act(x, i);
  }
  LS_FORMAT static float dot(const Decoded& w, const Act& x) {
    const int s = dot_words(w.hi, x.a1, dot_words(w.lo, x.a0, 0));
    return fmaf(w.d * x.d, static_cast<float>(s), w.m * x.sum);
  }
};

// Q4_K / Q5_K item i: chunk c = i % 4 of super-block i / 4, i.e. sub-blocks 2c (low nibbles) and
// 2c + 1 (high nibbles), elements [64 i, 64 i + 64) of the row: activation blocks 2i and 2i + 1.
struct KQuantAct {
  uint4 a[4];  // block 2i: a[0], a[1]; block 2i + 1: a[2], a[3]
  float d0, sum0, d1, sum1;
};
LS_FORMAT KQuantAct load_k_quant_act(const Q8Row& x, int i) {
  const int8_t* q = x.qs + 64 * i;
  const float2 s0 = load_cached<float2>(x.ds + 2 * i);
  const float2 s1 = load_cached<float2>(x.ds + 2 * i + 1);
  return {{load_act_16(q), load_act_16(q + 16), load_act_16(q + 32), load_act_16(q + 48)},
          s0.x,
          s0.y,
          s1.x,
          s1.y};
}

// Codes of sub-blocks 2c (lo) and 2c + 1 (hi) and their scales (d·sc) and mins (-dmin·m).
struct KQuantDecoded {
  uint32_t lo[2][4], hi[2][4];  // [16-byte half of the chunk][word]
  float scale[2], min[2];
};
// The second sub-block's code bytes as HighByte (uint8_t: Q4_K's high nibbles in place).
template <class HighByte = int8_t>
LS_FORMAT float k_quant_dot(const KQuantDecoded& w, const KQuantAct& x) {
  const int s0 = dot_words(w.lo[1], x.a[1], dot_words(w.lo[0], x.a[0], 0));
  const int s1 = dot_words<HighByte>(w.hi[1], x.a[3], dot_words<HighByte>(w.hi[0], x.a[2], 0));
  const float r = fmaf(w.scale[0] * x.d0, static_cast<float>(s0), w.min[0] * x.sum0);
  return fmaf(w.scale[1] * x.d1, static_cast<float>(s1), fmaf(w.min[1], x.sum1, r));
}

template <>
struct DotFormat<TensorType::Q4_K> {
  static constexpr bool kQ8 = true;
  static constexpr int kItemElems = 64;
  static constexpr int kBlockBytes = 144;
  struct Raw {
    uint4 meta;  // d, dmin, 12 scale bytes
    uint4 q0, q1;
  };
  using Decoded = KQuantDecoded;
  using Act = KQuantAct;
  LS_FORMAT static Raw load(const DeviceMatrix& m, int64_t row, int i) {
    const uint8_t* block = quant_row(m, row) + (i >> 2) * kBlockBytes;
    const uint8_t* q = block + kQ4KCodeOffset + 32 * (i & 3);
    return {load_cached<uint4>(block), load_weights_16(q), load_weights_16(q + 16)};
  }
  LS_FORMAT static Decoded decode(const Raw& raw, int i) {
    Decoded w;
    const uint4 q[2] = {raw.q0, raw.q1};
    LS_UNROLL
    for (int h = 0; h < 2; ++h) {
      LS_UNROLL
      for (int k = 0; k < 4; ++k) {
        const uint32_t v = word(q[h], k);
        w.lo[h][k] = v & 0x0f0f0f0fu;
        w.hi[h][k] = v & 0xf0f0f0f0u;
      }
    }
    k_quant_scales(raw.meta, i & 3, w.scale, w.min);
    w.scale[1] *= 1.0f / 16;
    return w;
  }
  LS_FORMAT static Act load_act(const Q8Row& x, int i) { return load_k_quant_act(x, i); }
  // The high nibbles stay in place: codes times 16 as unsigned bytes, their scale divided by 16
  // (both exact, so the sum has the same bits as with shifted codes).
  LS_FORMAT static float dot(const Decoded& w, const Act& x) { return k_quant_dot<uint8_t>(w, x); }
};

// As Q4_K, plus bit 4 of element l of sub-block j in bit j of qh[l] (qh at byte 16, qs at 48).
template <>
struct DotFormat<TensorType::Q5_K> {
  static constexpr bool kQ8 = true;
  static constexpr int kItemElems = 64;
  static constexpr int kBlockBytes = 176;
  struct Raw {
    uint4 meta;
    uint4 qh0, qh1;  // all 32 qh bytes (shared with the super-block's other chunks, via L1)
    uint4 q0, q1;
  };
  using Decoded = KQuantDecoded;
  using Act = KQuantAct;
  LS_FORMAT static Raw load(const DeviceMatrix& m, int64_t row, int i) {
    const uint8_t* block = quant_row(m, row) + (i >> 2) * kBlockBytes;
    const uint8_t* q = block + 48 + 32 * (i & 3);
    return {load_cached<uint4>(block), load_cached<uint4>(block + 16),
            load_cached<uint4>(block + 32), load_weights_16(q), load_weights_16(q + 16)};
  }
  LS_FORMAT static Decoded decode(const Raw& raw, int i) {
    Decoded w;
    const int c = i & 3;
    const uint4 q[2] = {raw.q0, raw.q1};
    const uint4 qh[2] = {raw.qh0, raw.qh1};
    LS_UNROLL
    for (int h = 0; h < 2; ++h) {
      LS_UNROLL
      for (int k = 0; k < 4; ++k) {
        const uint32_t v = word(q[h], k), high = word(qh[h], k);
        w.lo[h][k] = (v & 0x0f0f0f0fu) | (((high >> (2 * c)) << 4) & 0x10101010u);
        w.hi[h][k] = ((v >> 4) & 0x0f0f0f0fu) | (((high >> (2 * c + 1)) << 4) & 0x10101010u);
      }
    }
    k_quant_scales(raw.meta, c, w.scale, w.min);
    return w;
  }
  LS_FORMAT static Act load_act(const Q8Row& x, int i) { return load_k_quant_act(x, i); }
  LS_FORMAT static float dot(const Decoded& w, const Act& x) { return k_quant_dot(w, x); }
};

// Q6_K item i: super-block i / 4, half hf = (i / 2) % 2 (128 elements), l-half h = i % 2. It
// holds, for l in [16h, 16h + 16), element 32j + l of the half for each quarter j: low 4 bits
// in ql[64 hf + l + 32 (j & 1)] (low nibble for j < 2, high for j >= 2), high 2 bits in
// qh[32 hf + l] >> 2j, code - 32, scale group 8 hf + 2j + h. So three 16-byte loads, each used
// once; the four groups' activations are halves h of blocks 8 (i / 4) + 4 hf + j.
template <>
struct DotFormat<TensorType::Q6_K> {
  static constexpr bool kQ8 = true;
  static constexpr int kItemElems = 64;
  static constexpr int kBlockBytes = 208;
  struct Raw {
    uint4 ql_a, ql_b, qh;  // ql[64 hf + 16h ..], ql[64 hf + 32 + 16h ..], qh[32 hf + 16h ..]
    uint2 scales;          // scales[8 hf .. 8 hf + 8)
    float d;
  };
  struct Decoded {
    uint32_t q[4][4];  // quarter j, word k: codes 0..63
    float scale[4];    // d · scales[8 hf + 2j + h]
  };
  struct Act {
    uint4 a[4];
    float d[4], half_sum[4];
  };
  LS_FORMAT static Raw load(const DeviceMatrix& m, int64_t row, int i) {
    const int hf = (i >> 1) & 1, h = i & 1;
    const uint8_t* block = quant_row(m, row) + (i >> 2) * kBlockBytes;
    Raw raw;
    raw.ql_a = load_weights_16(block + 64 * hf + 16 * h);
    raw.ql_b = load_weights_16(block + 64 * hf + 32 + 16 * h);
    raw.qh = load_weights_16(block + 128 + 32 * hf + 16 * h);
    raw.scales = load_cached<uint2>(block + 192 + 8 * hf);
    raw.d = load_half(scale_row(m, row) + 2 * (i >> 2));
    return raw;
  }
  LS_FORMAT static Decoded decode(const Raw& raw, int i) {
    Decoded w;
    LS_UNROLL
    for (int k = 0; k < 4; ++k) {
      const uint32_t a = word(raw.ql_a, k), b = word(raw.ql_b, k), h = word(raw.qh, k);
      w.q[0][k] = (a & 0x0f0f0f0fu) | ((h << 4) & 0x30303030u);
      w.q[1][k] = (b & 0x0f0f0f0fu) | ((h << 2) & 0x30303030u);
      w.q[2][k] = ((a >> 4) & 0x0f0f0f0fu) | (h & 0x30303030u);
      w.q[3][k] = ((b >> 4) & 0x0f0f0f0fu) | ((h >> 2) & 0x30303030u);
    }
    // Group 2j + h of the half: byte 2j + h of the 8 loaded scale bytes.
    const int h = i & 1;
    LS_UNROLL
    for (int j = 0; j < 4; ++j) {
      const uint32_t sc_word = j < 2 ? raw.scales.x : raw.scales.y;
      const int byte = 2 * (j & 1) + h;
      w.scale[j] = raw.d * static_cast<float>(static_cast<int8_t>(sc_word >> (8 * byte)));
    }
    return w;
  }
  LS_FORMAT static Act load_act(const Q8Row& x, int i) {
    const int hf = (i >> 1) & 1, h = i & 1;
    const int block0 = 8 * (i >> 2) + 4 * hf;
    Act act;
    LS_UNROLL
    for (int j = 0; j < 4; ++j) {
      act.a[j] = load_act_16(x.qs + 32 * (block0 + j) + 16 * h);
      const float4 s = load_cached<float4>(x.ds + block0 + j);
      act.d[j] = s.x;
      act.half_sum[j] = h == 0 ? s.z : s.w;
    }
    return act;
  }
  LS_FORMAT static float dot(const Decoded& w, const Act& x) {
    float r = 0.0f;
    LS_UNROLL
    for (int j = 0; j < 4; ++j) {
      const int s = dot_words(w.q[j], x.a[j], 0);
      r = fmaf(w.scale[j], fmaf(x.d[j], static_cast<float>(s), -32.0f * x.half_sum[j]), r);
    }
    return r;
  }
};

// ---------------------------------------------------------------------------------------
// Float formats: item = 16 bytes of weights, fp32 products.

template <TensorType T>
struct FloatDotFormat {
  static constexpr bool kQ8 = false;
  static constexpr int kItemElems = T == TensorType::F32 ? 4 : 8;
  using Raw = uint4;
  struct Decoded {
    float w[kItemElems];
  };
  struct Act {
    float x[kItemElems];
  };
  LS_FORMAT static Raw load(const DeviceMatrix& m, int64_t row, int i) {
    return load_weights_16(quant_row(m, row) + 16 * i);
  }
  LS_FORMAT static Decoded decode(const Raw& raw, int) {
    Decoded d;
    LS_UNROLL
    for (int k = 0; k < 4; ++k) {
      const uint32_t v = word(raw, k);
      if constexpr (T == TensorType::F32) {
        d.w[k] = bits_to_float(v);
      } else if constexpr (T == TensorType::F16) {
        d.w[2 * k] = half_bits_to_float(v);
        d.w[2 * k + 1] = half_bits_to_float(v >> 16);
      } else {
        d.w[2 * k] = bits_to_float(v << 16);
        d.w[2 * k + 1] = bits_to_float(v & 0xffff0000u);
      }
    }
    return d;
  }
  LS_FORMAT static Act load_act(const float* x, int i) {
    Act a;
    LS_UNROLL
    for (int k = 0; k < kItemElems / 4; ++k) {
      const float4 v = load_cached<float4>(x + kItemElems * i + 4 * k);
      a.x[4 * k] = v.x;
      a.x[4 * k + 1] = v.y;
      a.x[4 * k + 2] = v.z;
      a.x[4 * k + 3] = v.w;
    }
    return a;
  }
  LS_FORMAT static float dot(const Decoded& w, const Act& x) {
    float s = 0.0f;
    LS_UNROLL
    for (int k = 0; k < kItemElems; ++k) s = fmaf(w.w[k], x.x[k], s);
    return s;
  }
};

template <>
struct DotFormat<TensorType::F32> : FloatDotFormat<TensorType::F32> {};
template <>
struct DotFormat<TensorType::F16> : FloatDotFormat<TensorType::F16> {};
template <>
struct DotFormat<TensorType::BF16> : FloatDotFormat<TensorType::BF16> {};

}  // namespace llamaserve::cuda
