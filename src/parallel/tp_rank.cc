#include "parallel/tp_rank.h"

#include <cstdlib>

#include <fmt/format.h>

#include "backend/cuda/check.h"

namespace llamaserve {

void keep_nvls_off_by_default() { setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0); }

Status nccl_all_reduce_sum(ncclComm_t comm, void* data, size_t count, cuda::SumType type,
                           cudaStream_t stream) {
  const ncclDataType_t nccl_type = type == cuda::SumType::kF32   ? ncclFloat
                                   : type == cuda::SumType::kF16 ? ncclHalf
                                                                 : ncclBfloat16;
  LS_NCCL_CHECK(ncclAllReduce(data, data, count, nccl_type, ncclSum, comm, stream));
  return Status::ok();
}

std::string describe_shard(const LoadedModel& full, const LoadedModel& shard) {
  return fmt::format("{} of {} heads, {} of {} KV heads, {} of {} FFN columns", shard.config.n_head,
                     full.config.n_head, shard.config.n_head_kv, full.config.n_head_kv,
                     shard.config.n_ff, full.config.n_ff);
}

}  // namespace llamaserve
