#include "core/aligned_vector.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace llamaserve {
namespace {

bool starts_a_line(const void* p) { return reinterpret_cast<uintptr_t>(p) % kCacheLineBytes == 0; }

TEST(CacheAlignedVectorTest, EveryAllocationStartsACacheLine) {
  for (size_t n : {1u, 3u, 17u, 249u, 5125u, 1u << 20}) {
    CacheAlignedVector<float> floats(n, 1.5f);
    EXPECT_TRUE(starts_a_line(floats.data())) << n;
    CacheAlignedVector<uint8_t> bytes(n);
    EXPECT_TRUE(starts_a_line(bytes.data())) << n;
    // Regrown, copied and moved storage too.
    floats.resize(3 * n + 1, 2.0f);
    EXPECT_TRUE(starts_a_line(floats.data())) << n;
    EXPECT_EQ(floats[0], 1.5f);
    EXPECT_EQ(floats[3 * n], 2.0f);
    const CacheAlignedVector<float> copy = floats;
    EXPECT_TRUE(starts_a_line(copy.data())) << n;
    EXPECT_EQ(copy, floats);
    CacheAlignedVector<float> moved = std::move(floats);
    EXPECT_TRUE(starts_a_line(moved.data())) << n;
  }
}

}  // namespace
}  // namespace llamaserve
