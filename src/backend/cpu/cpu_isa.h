// Which instruction set the CPU kernels run with. The build targets x86-64-v3 (AVX2/FMA/F16C)
// and every kernel has that version; the hot dot products also have an AVX-512 version
// (AVX512F/BW/VL + VNNI, dot_avx512.h), which a backend picks once, at creation, when the
// setting allows it and this CPU and its OS support it; where the CPU also has AMX (tile
// registers with 8-bit products), the products of 16 or more tokens with Q8_0, Q4_0, Q4_1, Q4_K
// and Q5_K weights run on the tile unit. The same binary therefore runs on AVX2-only machines.
#pragma once

#include <string_view>

#include "core/status.h"

namespace llamaserve::cpu {

// The setting (configuration tree, `--cpu-isa`): kAuto uses AVX-512 and AMX where the CPU has
// them, kAvx512 AVX-512 without AMX, kAvx2 keeps to the AVX2 kernels everywhere.
enum class CpuIsa { kAuto, kAvx512, kAvx2 };

// "auto", "avx512" or "avx2".
Result<CpuIsa> parse_cpu_isa(std::string_view text);
const char* cpu_isa_name(CpuIsa isa);

// What a backend's kernels run with: kAvx512Amx is kAvx512Vnni with AMX for the products of
// many tokens.
enum class KernelIsa { kAvx2, kAvx512Vnni, kAvx512Amx };

// "avx2", "avx512-vnni" or "avx512-amx".
const char* kernel_isa_name(KernelIsa isa);

// True when this CPU has AVX512F, AVX512BW, AVX512VL and AVX512-VNNI and the OS saves the
// opmask and ZMM registers on context switches (XCR0). Detected once per process.
bool cpu_has_avx512_vnni();

// True when cpu_has_avx512_vnni() and the CPU has AMX-TILE, AMX-INT8 and AVX512-VBMI, the OS
// saves the tile state (XCR0) and grants it to this process (asked for once, the first time this
// is called).
bool cpu_has_amx_int8();

// Whether kernels of `isa` may use AVX-512 instructions.
constexpr bool uses_avx512(KernelIsa isa) { return isa != KernelIsa::kAvx2; }

// The best that `setting` allows on this CPU: kAvx512Amx, kAvx512Vnni or kAvx2.
KernelIsa resolve_kernel_isa(CpuIsa setting);

}  // namespace llamaserve::cpu
