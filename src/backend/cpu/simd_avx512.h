// Helpers of the AVX-512 kernels (dot_*_avx512.cc). Only code chosen at run time after
// cpu_has_avx512_vnni() may call them.
//
// Why a target attribute instead of -mavx512* flags on the files: every function here and in
// those files carries LS_AVX512, so it is compiled for AVX-512 wherever it is defined, while
// everything else these files instantiate (simd.h's and blocks.h's inline functions, standard
// library templates) stays x86-64-v3 code. With per-file flags such an inline function would
// be emitted with AVX-512 instructions in these objects, and the linker could keep that copy
// for the AVX2 kernels too (one definition per inline function), which would then fault on
// AVX2-only machines. The attribute also lets the AVX2 helpers of simd.h (hsum, load_f16x8,
// ...) be inlined here, so both paths reduce in the same order.
#pragma once

// GCC 12 takes the self-initialized placeholders (`__m512i __Y = __Y;`) of its own AVX-512
// intrinsics for uninitialized values once they are inlined at -O3, a false positive that
// -Werror turns into a failed build. Include this header before any other that includes
// immintrin.h, so that the silencing covers the intrinsics' header and nothing else.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include <cstdint>

#define LS_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

namespace llamaserve::cpu::avx512 {

// Two 32-byte rows side by side: `lo` in bits 0..255, `hi` in bits 256..511.
LS_AVX512 inline __m512i load2x32(const void* lo, const void* hi) {
  return _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_loadu_si256(static_cast<const __m256i*>(lo))),
      _mm256_loadu_si256(static_cast<const __m256i*>(hi)), 1);
}

// The same 32 bytes in both halves.
LS_AVX512 inline __m512i broadcast32(__m256i v) { return _mm512_broadcast_i64x4(v); }

// Eight halves at a and eight at b as sixteen floats: a's in lanes 0..7, b's in 8..15.
LS_AVX512 inline __m512 load_f16x8_pair(const void* a, const void* b) {
  return _mm512_cvtph_ps(_mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(static_cast<const __m128i*>(a))),
      _mm_loadu_si128(static_cast<const __m128i*>(b)), 1));
}

LS_AVX512 inline __m256 low_half(__m512 v) { return _mm512_castps512_ps256(v); }
LS_AVX512 inline __m256 high_half(__m512 v) {
  return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
}
LS_AVX512 inline __m256i low_half(__m512i v) { return _mm512_castsi512_si256(v); }
LS_AVX512 inline __m256i high_half(__m512i v) { return _mm512_extracti64x4_epi64(v, 1); }

// {a in lanes 0..7, b in lanes 8..15}.
LS_AVX512 inline __m512 join(__m256 a, __m256 b) {
  return _mm512_castpd_ps(
      _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(a)), _mm256_castps_pd(b), 1));
}

// Σ of four u8 × s8 products per int32 lane, added to acc (vpdpbusd: `u` unsigned, `s`
// signed, no saturation). The AVX2 kernels get the same lane sums from maddubs + madd.
LS_AVX512 inline __m256i dpbusd(__m256i acc, __m256i u, __m256i s) {
  return _mm256_dpbusd_epi32(acc, u, s);
}
LS_AVX512 inline __m512i dpbusd(__m512i acc, __m512i u, __m512i s) {
  return _mm512_dpbusd_epi32(acc, u, s);
}

// s with the sign of q applied: -s where q < 0, s elsewhere (where q == 0 the product with
// |q| is zero anyway). With |q| as the unsigned operand this turns a signed × signed byte
// product into vpdpbusd's unsigned × signed one, as _mm256_sign_epi8 does for maddubs
// (AVX-512 has no vpsignb). |-128| reads as 128 unsigned and -(-128) wraps to -128, exactly as
// with vpsignb, so both paths agree even there.
LS_AVX512 inline __m256i apply_sign(__m256i s, __m256i q) {
  return _mm256_mask_sub_epi8(s, _mm256_movepi8_mask(q), _mm256_setzero_si256(), s);
}
LS_AVX512 inline __m512i apply_sign(__m512i s, __m512i q) {
  return _mm512_mask_sub_epi8(s, _mm512_movepi8_mask(q), _mm512_setzero_si512(), s);
}

}  // namespace llamaserve::cpu::avx512
