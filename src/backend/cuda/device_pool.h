// One device's memory for one model instance: a single cudaMalloc sized by the memory plan,
// handed out by a bump allocator (weights, KV cache, activations, workspace are all allocated
// once at load), freed when the pool is destroyed. No per-step allocation, so a forward pass
// cannot fail on memory and CUDA graphs see fixed addresses.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "core/status.h"

namespace llamaserve::cuda {

class DevicePool {
 public:
  // Allocates `bytes` on `device` (which becomes the calling thread's current device).
  static Result<std::unique_ptr<DevicePool>> create(int device, uint64_t bytes);
  ~DevicePool();
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  // `bytes` from the pool, 256-byte aligned; an error naming `what` when the pool is full
  // (a memory-plan bug: the plan sized the pool).
  Result<void*> allocate(uint64_t bytes, std::string_view what);
  template <typename T>
  Result<T*> allocate_array(uint64_t count, std::string_view what) {
    LS_ASSIGN_OR_RETURN(void* p, allocate(count * sizeof(T), what));
    return static_cast<T*>(p);
  }

  int device() const { return device_; }
  uint64_t capacity() const { return capacity_; }
  // Bytes of every pool alive in this process, and how many pools: what closing a model must
  // give back (counters only; pools stay independent).
  static uint64_t live_bytes();
  static int64_t live_pools();
  uint64_t used() const { return used_; }

 private:
  DevicePool(int device, uint8_t* base, uint64_t capacity)
      : device_(device), base_(base), capacity_(capacity) {}

  int device_;
  uint8_t* base_;
  uint64_t capacity_;
  uint64_t used_ = 0;
};

}  // namespace llamaserve::cuda
