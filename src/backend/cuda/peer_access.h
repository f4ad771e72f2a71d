// Peer-to-peer access between the devices of one process: enabled once per ordered pair and
// remembered, so that executors built one after another (or the pipeline and the all-reduce of
// the same devices) never ask twice (CUDA answers a repeated request with an error).
#pragma once

#include "core/status.h"

namespace llamaserve::cuda {

// Whether device `from` can read and write `to`'s memory directly.
Result<bool> can_access_peer(int from, int to);

// Lets kernels and copies on `from` access `to`'s memory. PRECONDITION: can_access_peer.
// Leaves `from` the current device.
Status enable_peer_access(int from, int to);

}  // namespace llamaserve::cuda
