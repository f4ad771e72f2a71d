#include "backend/cpu/cpu_isa.h"

#include <cpuid.h>

#include <cstdint>

namespace llamaserve::cpu {
namespace {

// XCR0 bits the OS sets when it saves a state component: 1 SSE (XMM), 2 AVX (YMM upper
// halves), 5 opmask, 6 ZMM upper halves of registers 0-15, 7 registers 16-31. Without all of
// them AVX-512 instructions fault even on a CPU that has them.
constexpr uint32_t kXcr0Avx512State = 0xe6;

bool os_saves_avx512_state() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & bit_OSXSAVE) == 0) return false;
  uint32_t xcr0_low = 0, xcr0_high = 0;
  // xgetbv through asm: the intrinsic needs the XSAVE target, which the build does not assume.
  __asm__ volatile("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  return (xcr0_low & kXcr0Avx512State) == kXcr0Avx512State;
}

bool detect_avx512_vnni() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
         os_saves_avx512_state();
}

}  // namespace

Result<CpuIsa> parse_cpu_isa(std::string_view text) {
  if (text == "auto") return CpuIsa::kAuto;
  if (text == "avx2") return CpuIsa::kAvx2;
  return make_error(StatusCode::kInvalidArgument, "CPU ISA '{}': expected auto or avx2", text);
}

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAuto: return "auto";
    case CpuIsa::kAvx2: return "avx2";
  }
  return "?";
}

const char* kernel_isa_name(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kAvx2: return "avx2";
    case KernelIsa::kAvx512Vnni: return "avx512-vnni";
  }
  return "?";
}

bool cpu_has_avx512_vnni() {
  static const bool has = detect_avx512_vnni();
  return has;
}

KernelIsa resolve_kernel_isa(CpuIsa setting) {
  return setting == CpuIsa::kAuto && cpu_has_avx512_vnni() ? KernelIsa::kAvx512Vnni
                                                           : KernelIsa::kAvx2;
}

}  // namespace llamaserve::cpu
