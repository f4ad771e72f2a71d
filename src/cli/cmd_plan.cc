// llamaserve plan: will a model serve N tokens of context to C concurrent sequences on G
// GPUs, and with which tensor-parallel × pipeline × replica layout?
//
//   llamaserve plan (-m MODEL.gguf | --shape NAME [--type f16]) [--ctx N] [--concurrency C]
//                   [--gpus G] [--gpu-mem 141GB] [--gpu-util 0.90] [--kv-type f16|q8_0]
//                   [--batch-tokens 512] [--json]
// Prints weights per GPU, KV bytes per token and per sequence, the activation estimate, the
// free KV tokens, and for every layout (tp × pp × replicas = G) whether it fits, each with its
// arithmetic so it can be checked by hand; a layout whose tp the tensor-parallel executor
// cannot split the model into is listed with the reason. The placement assumptions are listed
// in src/model/plan.h and docs/tools.md.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "gguf/gguf.h"
#include "model/importers/file_types.h"
#include "model/plan.h"
#include "model/shapes.h"

namespace llamaserve::cli {
namespace {

using json = nlohmann::ordered_json;

struct PlanCliOptions {
  std::string model_path;
  std::string shape;
  std::string type = "f16";
  int64_t n_ctx = 0;  // 0: the model's training context
  int64_t concurrency = 1;
  int gpus = 1;
  std::string gpu_mem = "141GB";
  double gpu_util = 0.90;
  std::string kv_type = "f16";
  int32_t batch_tokens = 512;
  bool json_output = false;
};

struct PlanInput {
  std::string description;
  ModelConfig config;
  std::vector<NamedTensorBytes> tensors;
};

Result<PlanInput> load_input(const PlanCliOptions& o) {
  PlanInput in;
  if (!o.model_path.empty() == !o.shape.empty()) {
    return make_error(StatusCode::kInvalidArgument,
                      "give exactly one of -m MODEL and --shape NAME");
  }
  if (!o.model_path.empty()) {
    LS_ASSIGN_OR_RETURN(auto file, GgufFile::open(o.model_path));
    LS_ASSIGN_OR_RETURN(in.config, model_config_from_gguf(*file));
    for (const GgufTensorInfo& t : file->tensors()) {
      const int64_t cols = t.dims.empty() ? 0 : static_cast<int64_t>(t.dims[0]);
      in.tensors.push_back({t.name, t.n_bytes, cols, t.type});
    }
    in.description = o.model_path;
    return in;
  }
  LS_ASSIGN_OR_RETURN(const ModelShape* shape, find_model_shape(o.shape));
  LS_ASSIGN_OR_RETURN(const FileType type, parse_file_type(o.type));
  in.config = config_from_shape(*shape);
  in.tensors = llama_tensor_bytes(in.config, type);
  in.description = fmt::format("{} ({}), {}", shape->name, shape->description, type.name);
  return in;
}

json layout_json(const LayoutPlan& l) {
  json j = {{"tp", l.tp}, {"pp", l.pp}, {"replicas", l.replicas}};
  if (!l.impossible_reason.empty()) {
    j["possible"] = false;
    j["reason"] = l.impossible_reason;
    return j;
  }
  j["possible"] = true;
  j["fits"] = l.fits;
  j["max_layers_per_stage"] = l.max_layers_per_stage;
  j["tight_stage"] = l.tight_stage;
  j["weights_bytes_per_gpu"] = l.weights_per_gpu;
  j["activations_bytes_per_gpu"] = l.activations_per_gpu;
  j["budget_bytes_per_gpu"] = l.budget_per_gpu;
  j["free_kv_bytes_per_gpu"] = l.free_kv_bytes_per_gpu;
  j["kv_bytes_per_token_per_gpu"] = l.kv_bytes_per_token_per_gpu;
  j["kv_tokens_per_replica"] = l.kv_tokens_per_replica;
  j["seqs_per_replica"] = l.seqs_per_replica;
  j["kv_tokens_needed_per_replica"] = l.kv_tokens_needed;
  j["max_concurrency"] = l.max_concurrency;
  j["steps"] = l.steps;
  return j;
}

void print_json(const PlanInput& in, const PlanReport& r, const WeightBytes& w) {
  const PlanRequest& q = r.request;
  const ModelConfig& c = q.config;
  json out;
  out["model"] = in.description;
  out["config"] = {{"n_layer", c.n_layer},     {"n_embd", c.n_embd},          {"n_head", c.n_head},
                   {"n_head_kv", c.n_head_kv}, {"head_dim", c.head_dim},      {"n_ff", c.n_ff},
                   {"n_vocab", c.n_vocab},     {"tied_output", c.tied_output}};
  out["weights_bytes"] = w.total();
  out["request"] = {{"n_ctx", q.n_ctx},
                    {"concurrency", q.concurrency},
                    {"gpus", q.gpus},
                    {"gpu_memory_bytes", q.gpu_memory_bytes},
                    {"gpu_memory_utilization", q.gpu_memory_utilization},
                    {"kv_type", type_name(q.kv_type)},
                    {"kv_block_size", q.kv_block_size},
                    {"max_batch_tokens", q.max_batch_tokens},
                    {"workspace_bytes", q.workspace_bytes}};
  out["kv_bytes_per_token"] = r.kv_bytes_per_token;
  out["tokens_per_sequence"] = r.tokens_per_sequence;
  out["kv_bytes_per_sequence"] = r.kv_bytes_per_sequence;
  json layouts = json::array();
  for (const LayoutPlan& l : r.layouts) layouts.push_back(layout_json(l));
  out["layouts"] = std::move(layouts);
  out["recommended"] = r.recommended ? json(*r.recommended) : json(nullptr);
  fmt::print("{}\n", out.dump(2));
}

void print_text(const PlanInput& in, const PlanReport& r, const WeightBytes& w) {
  const PlanRequest& q = r.request;
  const ModelConfig& c = q.config;
  fmt::print("model: {}\n", in.description);
  fmt::print("  {} layers, n_embd {}, {} heads / {} KV heads of {}, n_ff {}, vocab {}{}\n",
             c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.head_dim, c.n_ff, c.n_vocab,
             c.tied_output ? ", tied embeddings" : "");
  fmt::print("  weights {} (layers {} + token_embd {} + output {})\n", format_size(w.total()),
             format_size(w.total() - w.token_embd - w.output - w.output_norm - w.other),
             format_size(w.token_embd), format_size(w.output));
  const uint64_t elem_row = row_bytes(q.kv_type, static_cast<size_t>(c.kv_dim()));
  fmt::print("KV cache ({}): 2 (K,V) x {} layers x {} B ({} KV heads x {} dims) = {} B per token\n",
             type_name(q.kv_type), c.n_layer, elem_row, c.n_head_kv, c.head_dim,
             r.kv_bytes_per_token);
  fmt::print("  per sequence: {} tokens ({} rounded up to blocks of {}) x {} B = {}\n",
             r.tokens_per_sequence, q.n_ctx, q.kv_block_size, r.kv_bytes_per_token,
             format_size(r.kv_bytes_per_sequence));
  fmt::print("  all {} sequences: {}\n", q.concurrency,
             format_size(r.kv_bytes_per_sequence * static_cast<uint64_t>(q.concurrency)));
  fmt::print("request: context {} x {} sequences on {} GPU(s) of {} at {:.0f}% utilization\n\n",
             q.n_ctx, q.concurrency, q.gpus, format_size(q.gpu_memory_bytes),
             100.0 * q.gpu_memory_utilization);

  fmt::print("{:>3} {:>3} {:>4}  {:>12} {:>11} {:>12} {:>14} {:>12} {:>9}  {}\n", "tp", "pp", "rep",
             "weights/GPU", "act/GPU", "KV B/tok/GPU", "KV tok/replica", "needed/rep", "max conc",
             "fits");
  for (size_t i = 0; i < r.layouts.size(); ++i) {
    const LayoutPlan& l = r.layouts[i];
    if (!l.impossible_reason.empty()) {
      fmt::print("{:>3} {:>3} {:>4}  not possible: {}\n", l.tp, l.pp, l.replicas,
                 l.impossible_reason);
      continue;
    }
    fmt::print("{:>3} {:>3} {:>4}  {:>12} {:>11} {:>12} {:>14} {:>12} {:>9}  {}{}\n", l.tp, l.pp,
               l.replicas, format_size(l.weights_per_gpu), format_size(l.activations_per_gpu),
               l.kv_bytes_per_token_per_gpu, l.kv_tokens_per_replica, l.kv_tokens_needed,
               l.max_concurrency, l.fits ? "yes" : "no",
               r.recommended == i ? "  <- recommended" : "");
  }
  if (r.recommended) {
    const LayoutPlan& best = r.layouts[*r.recommended];
    fmt::print(
        "\nrecommended: --tp {} --pp {} --replicas {} (the most replicas that fit, then "
        "the fewest pipeline stages)\n",
        best.tp, best.pp, best.replicas);
  } else {
    fmt::print(
        "\nno layout fits: use more or larger GPUs, a shorter context, fewer concurrent "
        "sequences, --kv-type q8_0, or a smaller weight type\n");
  }
  fmt::print("\narithmetic (KiB, MiB, GiB = 2^10, 2^20, 2^30 bytes):\n");
  for (const LayoutPlan& l : r.layouts) {
    if (!l.impossible_reason.empty()) continue;
    fmt::print("tp {} x pp {} x {} replicas:\n", l.tp, l.pp, l.replicas);
    for (const std::string& step : l.steps) fmt::print("  {}\n", step);
  }
}

Status run_plan(const PlanCliOptions& o) {
  LS_ASSIGN_OR_RETURN(PlanInput in, load_input(o));
  PlanRequest req;
  req.config = in.config;
  LS_ASSIGN_OR_RETURN(req.weights, group_weight_bytes(in.tensors, in.config));
  req.n_ctx = o.n_ctx > 0 ? o.n_ctx : in.config.n_ctx_train;
  req.concurrency = o.concurrency;
  req.gpus = o.gpus;
  LS_ASSIGN_OR_RETURN(req.gpu_memory_bytes, parse_byte_size(o.gpu_mem));
  req.gpu_memory_utilization = o.gpu_util;
  auto kv_type = parse_kv_cache_type(o.kv_type);
  if (!kv_type.is_ok()) {
    return make_error(StatusCode::kInvalidArgument, "--kv-type: {}", kv_type.status().message());
  }
  req.kv_type = *kv_type;
  req.max_batch_tokens = o.batch_tokens;
  LS_ASSIGN_OR_RETURN(PlanReport report, make_plan(req));
  if (o.json_output) {
    print_json(in, report, req.weights);
  } else {
    print_text(in, report, req.weights);
  }
  return Status::ok();
}

std::function<int()> setup_plan(CLI::App& sub) {
  auto o = std::make_shared<PlanCliOptions>();
  sub.add_option("-m,--model", o->model_path, "GGUF model (its real tensor sizes)");
  sub.add_option("--shape", o->shape, "a known shape instead: " + model_shape_names());
  sub.add_option("--type", o->type, "weight type of --shape: " + file_type_names())
      ->capture_default_str();
  sub.add_option("--ctx", o->n_ctx, "tokens per sequence (default: the model's context length)");
  sub.add_option("--concurrency", o->concurrency, "sequences in flight")->capture_default_str();
  sub.add_option("--gpus", o->gpus, "GPUs")->capture_default_str();
  sub.add_option("--gpu-mem", o->gpu_mem, "memory per GPU (141GB, 80GiB, ...)")
      ->capture_default_str();
  sub.add_option("--gpu-util", o->gpu_util, "share of GPU memory the server may use")
      ->capture_default_str();
  sub.add_option("--kv-type", o->kv_type, "KV cache type: f16 or q8_0")->capture_default_str();
  sub.add_option("--batch-tokens", o->batch_tokens, "rows per forward pass (activations)")
      ->capture_default_str();
  sub.add_flag("--json", o->json_output, "print one JSON object");
  return [o] {
    Status status = run_plan(*o);
    if (!status.is_ok()) {
      std::fprintf(stderr, "llamaserve plan: %s\n", status.to_string().c_str());
      return 1;
    }
    return 0;
  };
}

}  // namespace

LLAMASERVE_COMMAND(plan, "plan",
                   "Plan GPU memory: weights, KV cache and which tp/pp/replica layouts fit",
                   setup_plan);

}  // namespace llamaserve::cli
