// Settings of the CUDA kernels that an operator may need to change, as one plain struct. It
// is part of the configuration tree (service/config.h) and travels in the executor options to
// the backend and the kernels' launchers; no kernel code reads the environment. Everything
// else about kernel choice is decided by the code from the shapes and was settled by
// measurement (docs/dev/cuda-experiments.md).
#pragma once

namespace llamaserve {

struct KernelTuning {
  // Programmatic dependent launch: a kernel starts its prologue while the previous one ends.
  // Off for tools that cannot follow PDL (some profilers and sanitizers) or to compare.
  bool pdl = true;
  // Times every operation of every layer with CUDA events and logs a per-operation report when
  // the executor closes. Slows the passes down (no CUDA graphs); for profiling only.
  bool op_times = false;
};

}  // namespace llamaserve
