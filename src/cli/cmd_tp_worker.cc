// llamaserve tp-worker: one rank (1 to N-1) of a tensor-parallel group whose ranks are
// processes, one per GPU, on one host or several. Rank 0 is the server:
//
//   llamaserve serve -m MODEL --tp N --tp-rank 0 --tp-listen PORT --device cuda:0 [options]
//   llamaserve tp-worker -m MODEL --tp N --tp-rank R --tp-coordinator HOST:PORT --device cuda:D
//
// The worker loads the model (the same file as rank 0: the rendezvous compares fingerprints),
// connects to rank 0 (retrying for --tp-timeout-ms while rank 0 is not listening yet), takes the
// KV cache and pass options from it, uploads its shard and then runs every batch rank 0 sends.
// Exit code 0 when rank 0 shuts the group down (its executor is freed) or closes the connection
// between steps; 1 when anything fails (the reason is logged, and rank 0 has been told); 2 for
// bad options. Every option is also read from LLAMASERVE_<NAME> (LLAMASERVE_TP_RANK, ...), which
// suits a Kubernetes pod spec (docs/multi-gpu.md).
#include <spdlog/spdlog.h>

#include "cli/command.h"
#include "server/config_layer.h"
#include "service/config.h"
#include "service/model_service.h"

namespace llamaserve::cli {
namespace {

int run_tp_worker_command(const ModelSpec& spec) {
  if (spec.path.empty()) {
    spdlog::error("tp-worker: no model: pass -m/--model or set LLAMASERVE_MODEL");
    return 2;
  }
  const Status status = run_tp_worker(spec);
  if (!status.is_ok()) {
    spdlog::error("tp-worker rank {}: {}", spec.layout.tp_rank, status.to_string());
    return status.code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  spdlog::info("tp-worker rank {}: done", spec.layout.tp_rank);
  return 0;
}

std::function<int()> setup_tp_worker(CLI::App& sub) {
  auto spec = std::make_shared<ModelSpec>();
  LayoutSpec& layout = spec->layout;
  layout.device = "cuda:0";
  layout.tp_rank = 1;
  sub.add_option("-m,--model", spec->path, "GGUF model file, the same as rank 0's (required)");
  sub.add_option("--tp", layout.tensor_parallel,
                 "Ranks in the tensor-parallel group, rank 0 (the server) included (required)")
      ->required()
      ->check(CLI::Range(2, 1024));
  sub.add_option("--tp-rank", layout.tp_rank, "This process's rank, 1 to tp - 1")
      ->required()
      ->check(CLI::Range(1, 1023));
  sub.add_option("--tp-coordinator", layout.tp_coordinator,
                 "Rank 0's rendezvous address, HOST:PORT (its --tp-listen port)")
      ->required();
  sub.add_option("--device", layout.device, "This process's GPU: cuda:N or N")
      ->envname("LLAMASERVE_DEVICES")
      ->capture_default_str();
  sub.add_option("--gpu-memory-utilization", layout.gpu_memory_utilization,
                 "Fraction of the GPU's memory this process may use")
      ->check(CLI::Range(0.01, 1.0))
      ->capture_default_str();
  sub.add_option("--tp-timeout-ms", layout.tp_timeout_ms, "How long to keep trying to reach rank 0")
      ->check(CLI::Range(int64_t{1}, int64_t{86400000}))
      ->capture_default_str();
  sub.add_flag_function(
      "--no-pdl", [spec](int64_t count) { spec->tuning.pdl = count == 0; },
      "Launch CUDA kernels without programmatic dependent launch");
  server::bind_env_vars(sub, "LLAMASERVE_");
  return [spec] { return run_tp_worker_command(*spec); };
}

}  // namespace

LLAMASERVE_COMMAND(tp_worker, "tp-worker",
                   "Run one rank (1..N-1) of a tensor-parallel group of processes; rank 0 is "
                   "`serve --tp-rank 0`",
                   setup_tp_worker);

}  // namespace llamaserve::cli
