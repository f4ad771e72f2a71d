// The single-device CPU executor: one CpuBackend running every layer, a thread pool, the
// paged KV cache and the activations, all allocated once at creation.
#pragma once

#include <cstdint>
#include <memory>

#include "backend/cpu/cpu_isa.h"
#include "core/status.h"
#include "executor/executor.h"
#include "model/weights.h"
#include "quant/types.h"

namespace llamaserve {

struct CpuExecutorOptions {
  int threads = 0;             // 0 = all online cores
  int32_t kv_block_size = 16;  // tokens per KV block
  // KV capacity: kv_capacity_bytes if > 0, else kv_capacity_tokens if > 0, else
  // ModelConfig::default_context_tokens() × 4 tokens (four full-length sequences).
  int64_t kv_capacity_tokens = 0;
  uint64_t kv_capacity_bytes = 0;
  int32_t max_batch_tokens = 512;        // rows per forward pass; larger batches run in pieces
  TensorType kv_type = TensorType::F16;  // F16, F32 or Q8_0
  bool reference_kernels = false;        // plain kernels for validation (slow)
  // AVX-512 kernels where the CPU has them (kAuto), or AVX2 only; describe() names the one
  // in use.
  cpu::CpuIsa cpu_isa = cpu::CpuIsa::kAuto;
};

Result<std::unique_ptr<Executor>> create_cpu_executor(std::shared_ptr<const LoadedModel> model,
                                                      const CpuExecutorOptions& options);

}  // namespace llamaserve
