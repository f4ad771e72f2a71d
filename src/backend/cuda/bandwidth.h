// The device's memory bandwidth ceiling, as the benchmarks compare against: a device-to-device
// cudaMemcpy timed with events, counting the bytes read and written.
#pragma once

#include <cstdint>

#include "core/status.h"

namespace llamaserve::cuda {

// Bytes per second read + written by copying `bytes` between two buffers on `device`: the
// median of `reps` timed copies after one warm-up. Allocates 2 * bytes for the duration.
Result<double> measure_copy_bandwidth(int device, uint64_t bytes, int reps);

}  // namespace llamaserve::cuda
