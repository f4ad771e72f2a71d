// The attention cases of cuda_kernels_bench: prefill, decode, and a prompt chunk beside decodes
// after up to 8k positions, each over f16 and Q8_0 caches; each returns its markdown table and
// writes its rows to `csv` (when given).
#pragma once

#include <cstdio>
#include <string>

#include "backend/cuda/launch.h"

namespace llamaserve::cuda::kernel_bench {

std::string bench_prefill_attention(int groups, FILE* csv, LaunchStream stream);
// `copy`: the device-to-device copy bandwidth (bytes/s) the decode reads are compared with.
std::string bench_decode_attention(int groups, double copy, FILE* csv, LaunchStream stream);
std::string bench_decode_attention_geometry(int groups, double copy, FILE* csv,
                                            LaunchStream stream);
std::string bench_decode_attention_grouped(int groups, double copy, FILE* csv, LaunchStream stream);
std::string bench_chunk_attention(int groups, FILE* csv, LaunchStream stream);

}  // namespace llamaserve::cuda::kernel_bench
