// Vectors whose first element starts a cache line: working memory that several threads write
// side by side (matrix product outputs split between threads by 64-byte columns, per-thread
// scratch), so that a split never shares a line between two threads and a 64-byte store never
// spans two lines.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace llamaserve {

inline constexpr size_t kCacheLineBytes = 64;

template <typename T>
struct CacheAlignedAllocator {
  using value_type = T;

  CacheAlignedAllocator() = default;
  template <typename U>
  CacheAlignedAllocator(const CacheAlignedAllocator<U>&) {}

  T* allocate(size_t n) {
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{kCacheLineBytes}));
  }
  void deallocate(T* p, size_t) { ::operator delete (p, std::align_val_t{kCacheLineBytes}); }

  template <typename U>
  bool operator==(const CacheAlignedAllocator<U>&) const {
    return true;
  }
};

template <typename T>
using CacheAlignedVector = std::vector<T, CacheAlignedAllocator<T>>;

}  // namespace llamaserve
