// Decoding of blocks built by hand from the GGUF (ggml) layout description, and the packing
// helpers as exact inverses of the decoders.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "quant/blocks.h"
#include "quant/quant.h"
#include "quant/quantize_blocks.h"

namespace llamaserve {
namespace {

constexpr uint16_t kHalfOne = 0x3c00;      // 1.0
constexpr uint16_t kHalfHalf = 0x3800;     // 0.5
constexpr uint16_t kHalfQuarter = 0x3400;  // 0.25
constexpr uint16_t kHalfMinusOne = 0xbc00;

template <typename Block>
std::vector<float> dequantize(TensorType type, const Block& block, int n) {
  std::vector<float> y(n);
  EXPECT_TRUE(dequantize_row(type, &block, y.data(), n).is_ok());
  return y;
}

// Byte j: low nibble j, high nibble 15 - j.
void fill_nibbles(uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
}

TEST(BlocksTest, Q4_0LowNibblesFirst) {
  BlockQ4_0 block{};
  block.d = Half{kHalfHalf};
  fill_nibbles(block.qs);
  // Elements 0..15 are the low nibbles 0..15, elements 16..31 the high nibbles 15..0;
  // each decodes to (q - 8) * 0.5.
  const std::vector<float> expected = {-4.0f, -3.5f, -3.0f, -2.5f, -2.0f, -1.5f, -1.0f, -0.5f,  //
                                       0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  2.5f,  3.0f,  3.5f,   //
                                       3.5f,  3.0f,  2.5f,  2.0f,  1.5f,  1.0f,  0.5f,  0.0f,   //
                                       -0.5f, -1.0f, -1.5f, -2.0f, -2.5f, -3.0f, -3.5f, -4.0f};
  EXPECT_EQ(dequantize(TensorType::Q4_0, block, 32), expected);
}

TEST(BlocksTest, Q4_1AddsMin) {
  BlockQ4_1 block{};
  block.d = Half{kHalfQuarter};
  block.m = Half{kHalfMinusOne};
  fill_nibbles(block.qs);
  const std::vector<float> y = dequantize(TensorType::Q4_1, block, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.25f * j - 1.0f) << j;
    EXPECT_EQ(y[16 + j], 0.25f * (15 - j) - 1.0f) << j;
  }
  EXPECT_EQ(y[0], -1.0f);
  EXPECT_EQ(y[15], 2.75f);
  EXPECT_EQ(y[16], 2.75f);
}

TEST(BlocksTest, Q8_0SignedBytes) {
  BlockQ8_0 block{};
  block.d = Half{0x3000};  // 0.125
  for (int i = 0; i < 32; ++i) block.qs[i] = static_cast<int8_t>(8 * i - 128);
  const std::vector<float> y = dequantize(TensorType::Q8_0, block, 32);
  EXPECT_EQ(y[0], -16.0f);
  EXPECT_EQ(y[16], 0.0f);
  EXPECT_EQ(y[31], 15.0f);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], 0.125f * (8 * i - 128));
}

// 12 scale bytes whose unpacked values were worked out by hand from the bit diagram:
//   sc[0..3] = low 6 bits of bytes 0..3; m[0..3] = low 6 bits of bytes 4..7;
//   sc[4..7] = low nibble of bytes 8..11 | top 2 bits of bytes 0..3 << 4;
//   m[4..7]  = high nibble of bytes 8..11 | top 2 bits of bytes 4..7 << 4.
constexpr uint8_t kScaleBytes[12] = {0x41, 0x82, 0xc3, 0x04, 0x45, 0x86,
                                     0xc7, 0x08, 0x21, 0x43, 0x65, 0x87};
constexpr uint8_t kScales[8] = {1, 2, 3, 4, 17, 35, 53, 7};
constexpr uint8_t kMins[8] = {5, 6, 7, 8, 18, 36, 54, 8};

TEST(BlocksTest, Q4_KScaleMinUnpacking) {
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    q4_k_scale_min(j, kScaleBytes, &sc, &m);
    EXPECT_EQ(sc, kScales[j]) << j;
    EXPECT_EQ(m, kMins[j]) << j;
  }
  uint8_t packed[12];
  quant_internal::pack_q4_k_scales(kScales, kMins, packed);
  EXPECT_EQ(std::memcmp(packed, kScaleBytes, 12), 0);
}

TEST(BlocksTest, Q4_KKnownBlock) {
  BlockQ4_K block{};
  block.d = Half{kHalfOne};
  block.dmin = Half{kHalfHalf};
  std::memcpy(block.scales, kScaleBytes, 12);
  // Byte b: low nibble b % 16, high nibble 15 - b % 16. Chunk c (bytes 32c..32c+31) holds
  // sub-block 2c in its low nibbles and sub-block 2c+1 in its high nibbles.
  for (int b = 0; b < 128; ++b) block.qs[b] = static_cast<uint8_t>((b % 16) | ((15 - b % 16) << 4));
  const std::vector<float> y = dequantize(TensorType::Q4_K, block, 256);
  for (int i = 0; i < 256; ++i) {
    const int sub_block = i / 32;
    const int byte = 32 * (sub_block / 2) + i % 32;
    const int q = sub_block % 2 == 0 ? byte % 16 : 15 - byte % 16;
    EXPECT_EQ(y[i], 1.0f * kScales[sub_block] * q - 0.5f * kMins[sub_block]) << i;
  }
  EXPECT_EQ(y[0], -2.5f);            // sc 1, q 0, m 5
  EXPECT_EQ(y[33], 25.0f);           // sub-block 1: sc 2, q = high nibble of byte 1 = 14, m 6
  EXPECT_EQ(y[64], -3.5f);           // sub-block 2: sc 3, q = low nibble of byte 32 = 0, m 7
  EXPECT_EQ(y[255], -4.0f);          // sub-block 7: sc 7, q = high nibble of byte 127 = 0, m 8
  EXPECT_EQ(y[143], 255.0f - 9.0f);  // sub-block 4: sc 17, q = low nibble of byte 79 = 15, m 18
}

TEST(BlocksTest, Q5_KHighBitsFromQh) {
  BlockQ5_K block{};
  block.d = Half{kHalfOne};
  block.dmin = Half{kHalfHalf};
  std::memcpy(block.scales, kScaleBytes, 12);
  for (int b = 0; b < 128; ++b) block.qs[b] = static_cast<uint8_t>((b % 16) | ((15 - b % 16) << 4));
  // qh[l] bit j is bit 4 of element l of sub-block j: set it for odd l in even sub-blocks
  // and for even l in odd sub-blocks.
  for (int l = 0; l < 32; ++l) block.qh[l] = l % 2 == 1 ? 0x55 : 0xaa;
  const std::vector<float> y = dequantize(TensorType::Q5_K, block, 256);
  for (int i = 0; i < 256; ++i) {
    const int sub_block = i / 32;
    const int l = i % 32;
    const int byte = 32 * (sub_block / 2) + l;
    const int low = sub_block % 2 == 0 ? byte % 16 : 15 - byte % 16;
    const int high = (l % 2) != (sub_block % 2) ? 16 : 0;
    EXPECT_EQ(y[i], 1.0f * kScales[sub_block] * (low + high) - 0.5f * kMins[sub_block]) << i;
  }
  EXPECT_EQ(y[1], 1.0f * (1 + 16) - 2.5f);    // sub-block 0, l 1: low 1, high bit set
  EXPECT_EQ(y[32], 2.0f * (15 + 16) - 3.0f);  // sub-block 1, l 0: low 15 (high nibble), bit set
}

// The Q6_K layout, written out independently of the library: each half of 128 elements uses
// 64 bytes of ql and 32 of qh; element 32 * quarter + l of a half has its low 4 bits in
// ql[l + 32 * (quarter % 2)] (low nibble for quarters 0-1, high for 2-3) and its high 2 bits
// at bits 2 * quarter of qh[l].
void encode_q6_k_by_hand(const int* biased_q, BlockQ6_K* block) {
  std::memset(block->ql, 0, sizeof block->ql);
  std::memset(block->qh, 0, sizeof block->qh);
  for (int half = 0; half < 2; ++half) {
    for (int quarter = 0; quarter < 4; ++quarter) {
      for (int l = 0; l < 32; ++l) {
        const int q = biased_q[128 * half + 32 * quarter + l];
        uint8_t& low_byte = block->ql[64 * half + 32 * (quarter % 2) + l];
        low_byte |= static_cast<uint8_t>((q & 15) << (quarter < 2 ? 0 : 4));
        block->qh[32 * half + l] |= static_cast<uint8_t>((q >> 4) << (2 * quarter));
      }
    }
  }
}

TEST(BlocksTest, Q6_KKnownBlock) {
  BlockQ6_K block{};
  block.d = Half{kHalfHalf};
  for (int g = 0; g < 16; ++g) block.scales[g] = static_cast<int8_t>(g - 8);
  int biased_q[256];
  for (int i = 0; i < 256; ++i) biased_q[i] = (i * 7) % 64;
  encode_q6_k_by_hand(biased_q, &block);
  const std::vector<float> y = dequantize(TensorType::Q6_K, block, 256);
  for (int i = 0; i < 256; ++i) {
    EXPECT_EQ(y[i], 0.5f * static_cast<float>(i / 16 - 8) * static_cast<float>(biased_q[i] - 32))
        << i;
  }
  EXPECT_EQ(y[0], 0.5f * -8 * -32);  // q 0 → -32, scale -8
  EXPECT_EQ(y[255], 0.5f * 7 * ((255 * 7) % 64 - 32));
  // The byte layout of the library's packer is the one written out above.
  int8_t q[256];
  for (int i = 0; i < 256; ++i) q[i] = static_cast<int8_t>(biased_q[i] - 32);
  uint8_t ql[128], qh[64];
  quant_internal::pack_q6_k_quants(q, ql, qh);
  EXPECT_EQ(std::memcmp(ql, block.ql, sizeof ql), 0);
  EXPECT_EQ(std::memcmp(qh, block.qh, sizeof qh), 0);
}

TEST(BlocksTest, GroupDecodersMatchBlockDecoders) {
  std::mt19937 rng(3);
  auto random_bytes = [&](void* p, size_t n) {
    auto* bytes = static_cast<uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<uint8_t>(rng());
  };
  BlockQ4_K q4k;
  BlockQ5_K q5k;
  BlockQ6_K q6k;
  random_bytes(&q4k, sizeof q4k);
  random_bytes(&q5k, sizeof q5k);
  random_bytes(&q6k, sizeof q6k);
  q4k.d = q5k.d = q6k.d = Half{0x2e66};
  q4k.dmin = q5k.dmin = Half{0x2a00};
  float full[256], part[32];
  dequantize_block_q4_k(q4k, full);
  for (int j = 0; j < 8; ++j) {
    dequantize_q4_k_sub_block(q4k, j, part);
    EXPECT_EQ(std::memcmp(part, full + 32 * j, sizeof(float) * 32), 0) << j;
  }
  dequantize_block_q5_k(q5k, full);
  for (int j = 0; j < 8; ++j) {
    dequantize_q5_k_sub_block(q5k, j, part);
    EXPECT_EQ(std::memcmp(part, full + 32 * j, sizeof(float) * 32), 0) << j;
  }
  dequantize_block_q6_k(q6k, full);
  for (int g = 0; g < 16; ++g) {
    dequantize_q6_k_group(q6k, g, part);
    EXPECT_EQ(std::memcmp(part, full + 16 * g, sizeof(float) * 16), 0) << g;
  }
}

TEST(BlocksTest, PackersInvertDecoders) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    uint8_t sc[8], m[8], packed[12];
    for (int j = 0; j < 8; ++j) {
      sc[j] = static_cast<uint8_t>(rng() % 64);
      m[j] = static_cast<uint8_t>(rng() % 64);
    }
    quant_internal::pack_q4_k_scales(sc, m, packed);
    for (int j = 0; j < 8; ++j) {
      uint8_t sc_out, m_out;
      q4_k_scale_min(j, packed, &sc_out, &m_out);
      ASSERT_EQ(sc_out, sc[j]);
      ASSERT_EQ(m_out, m[j]);
    }

    uint8_t q5[256];
    for (int i = 0; i < 256; ++i) q5[i] = static_cast<uint8_t>(rng() % 32);
    BlockQ5_K block5{};
    quant_internal::pack_k_quants(q5, block5.qs, block5.qh);
    BlockQ4_K block4{};
    uint8_t q4[256];
    for (int i = 0; i < 256; ++i) q4[i] = q5[i] & 15;
    quant_internal::pack_k_quants(q4, block4.qs, nullptr);
    for (int i = 0; i < 256; ++i) {
      ASSERT_EQ(q5_k_quant(block5, i), q5[i]) << i;
      ASSERT_EQ(q4_k_quant(block4, i), q4[i]) << i;
    }

    int8_t q6[256];
    for (int i = 0; i < 256; ++i) q6[i] = static_cast<int8_t>(static_cast<int>(rng() % 64) - 32);
    BlockQ6_K block6{};
    quant_internal::pack_q6_k_quants(q6, block6.ql, block6.qh);
    for (int i = 0; i < 256; ++i) ASSERT_EQ(q6_k_quant(block6, i), q6[i]) << i;
  }
}

}  // namespace
}  // namespace llamaserve
