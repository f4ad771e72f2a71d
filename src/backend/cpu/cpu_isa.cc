#include "backend/cpu/cpu_isa.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

namespace llamaserve::cpu {
namespace {

// XCR0 bits the OS sets when it saves a state component: 1 SSE (XMM), 2 AVX (YMM upper
// halves), 5 opmask, 6 ZMM upper halves of registers 0-15, 7 registers 16-31. Without all of
// them AVX-512 instructions fault even on a CPU that has them.
constexpr uint32_t kXcr0Avx512State = 0xe6;
// 17 tile configuration, 18 tile data (AMX).
constexpr uint32_t kXcr0TileState = 0x60000;

// XCR0's low half, or 0 where the OS has not enabled XSAVE.
uint32_t xcr0() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & bit_OSXSAVE) == 0) return 0;
  uint32_t xcr0_low = 0, xcr0_high = 0;
  // xgetbv through asm: the intrinsic needs the XSAVE target, which the build does not assume.
  __asm__ volatile("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  return xcr0_low;
}

bool os_saves_avx512_state() { return (xcr0() & kXcr0Avx512State) == kXcr0Avx512State; }

bool detect_avx512_vnni() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
         os_saves_avx512_state();
}

// CPUID leaf 7 EDX: bit 24 AMX-TILE, bit 25 AMX-INT8 (and ECX bit 1, AVX512-VBMI, which the AMX
// kernels use too). Linux hands a process the tile state only once it asks (arch_prctl
// ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA, 18): before that a tile instruction faults.
bool detect_amx_int8() {
  if (!cpu_has_avx512_vnni()) return false;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  constexpr unsigned kAmxTileInt8 = (1u << 24) | (1u << 25);
  constexpr unsigned kAvx512Vbmi = 1u << 1;  // ECX; every CPU with AMX has it
  if ((edx & kAmxTileInt8) != kAmxTileInt8 || (ecx & kAvx512Vbmi) == 0 ||
      (xcr0() & kXcr0TileState) != kXcr0TileState) {
    return false;
  }
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

}  // namespace

Result<CpuIsa> parse_cpu_isa(std::string_view text) {
  if (text == "auto") return CpuIsa::kAuto;
  if (text == "avx512") return CpuIsa::kAvx512;
  if (text == "avx2") return CpuIsa::kAvx2;
  return make_error(StatusCode::kInvalidArgument, "CPU ISA '{}': expected auto, avx512 or avx2",
                    text);
}

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAuto: return "auto";
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAvx2: return "avx2";
  }
  return "?";
}

const char* kernel_isa_name(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kAvx2: return "avx2";
    case KernelIsa::kAvx512Vnni: return "avx512-vnni";
    case KernelIsa::kAvx512Amx: return "avx512-amx";
  }
  return "?";
}

bool cpu_has_avx512_vnni() {
  static const bool has = detect_avx512_vnni();
  return has;
}

bool cpu_has_amx_int8() {
  static const bool has = detect_amx_int8();
  return has;
}

KernelIsa resolve_kernel_isa(CpuIsa setting) {
  if (setting == CpuIsa::kAvx2 || !cpu_has_avx512_vnni()) return KernelIsa::kAvx2;
  return setting == CpuIsa::kAuto && cpu_has_amx_int8() ? KernelIsa::kAvx512Amx
                                                        : KernelIsa::kAvx512Vnni;
}

}  // namespace llamaserve::cpu
