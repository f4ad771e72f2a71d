#include "backend/cuda/memory_plan.h"

#include <algorithm>

#include <fmt/format.h>

#include "backend/cuda/cuda_weights.h"

namespace llamaserve::cuda {
namespace {

double gib(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

}  // namespace

std::string MemoryPlan::describe(int32_t block_size) const {
  return fmt::format(
      "weights {:.2f} GiB, activations {:.2f} GiB, workspace {:.2f} GiB, KV {} blocks x {} tokens "
      "{} ({:.2f} GiB); pool {:.2f} GiB of a {:.2f} GiB budget ({:.2f} GiB free of {:.2f} GiB)",
      gib(weights), gib(activations), gib(workspace), kv_blocks, block_size,
      kv_type == KvType::kQ8_0 ? "q8_0" : "f16", gib(kv_bytes()), gib(pool_bytes()), gib(budget),
      gib(device_free), gib(device_total));
}

Result<MemoryPlan> plan_memory(const LoadedModel& model, const MemoryPlanRequest& r) {
  if (!(r.gpu_memory_utilization > 0.0 && r.gpu_memory_utilization <= 1.0)) {
    return make_error(StatusCode::kInvalidArgument, "gpu_memory_utilization = {} must be in (0, 1]",
                      r.gpu_memory_utilization);
  }
  MemoryPlan plan;
  plan.device_free = r.device_free;
  plan.device_total = r.device_total;
  const uint64_t allowed =
      static_cast<uint64_t>(static_cast<double>(r.device_total) * r.gpu_memory_utilization);
  const uint64_t used_by_others = r.device_total - std::min(r.device_free, r.device_total);
  plan.budget = allowed > used_by_others ? allowed - used_by_others : 0;
  LS_ASSIGN_OR_RETURN(plan.weights, cuda_weight_bytes(model, r.range));
  plan.activations = CudaActivations::bytes(model.config, r.limits);
  plan.workspace = r.workspace_bytes;
  plan.kv_type = r.kv_type;
  plan.kv_bytes_per_block =
      CudaKvCache::bytes_per_block(model.config, r.kv_type, r.range.n_layers(), r.kv_block_size);

  // Two blocks of slack cover the rounding of the K and V allocations.
  const uint64_t fixed = plan.weights + plan.activations + plan.workspace + 2 * kDeviceAlignment;
  const uint64_t min_kv = 2 * plan.kv_bytes_per_block;  // one usable block and the scratch block
  if (fixed + min_kv > plan.budget) {
    return make_error(StatusCode::kResourceExhausted,
                      "the model does not fit on the GPU: weights {:.2f} GiB + activations {:.2f} "
                      "GiB (max {} tokens per pass) + workspace {:.2f} GiB + KV for one block "
                      "{:.3f} GiB exceed the budget of {:.2f} GiB ({:.0f}% of {:.2f} GiB, of which "
                      "{:.2f} GiB is free)",
                      gib(plan.weights), gib(plan.activations), r.limits.max_tokens,
                      gib(plan.workspace), gib(min_kv), gib(plan.budget),
                      100.0 * r.gpu_memory_utilization, gib(r.device_total), gib(r.device_free));
  }
  const uint64_t fit_blocks = (plan.budget - fixed) / plan.kv_bytes_per_block - 1;
  uint64_t blocks = fit_blocks;
  if (r.kv_capacity_tokens > 0) {
    blocks = static_cast<uint64_t>((r.kv_capacity_tokens + r.kv_block_size - 1) / r.kv_block_size);
    if (blocks > fit_blocks) {
      return make_error(StatusCode::kResourceExhausted,
                        "a KV cache of {} tokens needs {:.2f} GiB; after weights {:.2f} GiB, "
                        "activations {:.2f} GiB and workspace {:.2f} GiB the budget of {:.2f} GiB "
                        "leaves {:.2f} GiB ({} tokens)",
                        r.kv_capacity_tokens, gib((blocks + 1) * plan.kv_bytes_per_block),
                        gib(plan.weights), gib(plan.activations), gib(plan.workspace),
                        gib(plan.budget), gib(plan.budget - fixed), fit_blocks * r.kv_block_size);
    }
  }
  plan.kv_blocks = static_cast<int32_t>(std::min<uint64_t>(blocks, 1u << 30));
  return plan;
}

}  // namespace llamaserve::cuda
