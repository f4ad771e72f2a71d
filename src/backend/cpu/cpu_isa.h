// Which instruction set the CPU kernels run with. The build targets x86-64-v3 (AVX2/FMA/F16C)
// and every kernel has that version; the hot dot products also have an AVX-512 version
// (AVX512F/BW/VL + VNNI, dot_avx512.h), which a backend picks once, at creation, when the
// setting allows it and this CPU and its OS support it. The same binary therefore runs on
// AVX2-only machines.
#pragma once

#include <string_view>

#include "core/status.h"

namespace llamaserve::cpu {

// The setting (configuration tree, `--cpu-isa`): kAuto uses AVX-512 where the CPU has it,
// kAvx2 keeps to the AVX2 kernels everywhere.
enum class CpuIsa { kAuto, kAvx2 };

// "auto" or "avx2".
Result<CpuIsa> parse_cpu_isa(std::string_view text);
const char* cpu_isa_name(CpuIsa isa);

// What a backend's kernels run with.
enum class KernelIsa { kAvx2, kAvx512Vnni };

// "avx2" or "avx512-vnni".
const char* kernel_isa_name(KernelIsa isa);

// True when this CPU has AVX512F, AVX512BW, AVX512VL and AVX512-VNNI and the OS saves the
// opmask and ZMM registers on context switches (XCR0). Detected once per process.
bool cpu_has_avx512_vnni();

// kAvx512Vnni for kAuto on a CPU that has it, otherwise kAvx2.
KernelIsa resolve_kernel_isa(CpuIsa setting);

}  // namespace llamaserve::cpu
