#include "model/plan.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

#include <fmt/format.h>

namespace llamaserve {
namespace {

constexpr int kMaxGpus = 4096;
constexpr int64_t kMaxTokens = int64_t{1} << 40;

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// Layer index of "blk.N.rest", or nullopt for other names.
std::optional<int64_t> layer_of(std::string_view name) {
  if (!name.starts_with("blk.")) return std::nullopt;
  name.remove_prefix(4);
  int64_t layer = -1;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), layer);
  if (ec != std::errc() || end == name.data() || end == name.data() + name.size() || *end != '.')
    return std::nullopt;
  return layer;
}

struct Stage {
  int64_t first_layer = 0;
  int64_t n_layers = 0;
};

std::vector<Stage> split_layers(int64_t n_layer, int pp) {
  std::vector<Stage> stages(static_cast<size_t>(pp));
  int64_t next = 0;
  for (int s = 0; s < pp; ++s) {
    stages[s].first_layer = next;
    stages[s].n_layers = n_layer / pp + (s < n_layer % pp ? 1 : 0);
    next += stages[s].n_layers;
  }
  return stages;
}

// The pieces of one GPU's weights, kept apart for the explanation.
struct StageWeights {
  uint64_t split = 0;       // this stage's layer matrices, before dividing by tp
  uint64_t replicated = 0;  // this stage's norms
  uint64_t embd = 0;        // token_embd, whole
  uint64_t head = 0;        // untied output, whole on every rank
  uint64_t head_tied = 0;   // token_embd again on the last stage of a tied model (pp > 1)
  uint64_t output_norm = 0;
  uint64_t other = 0;

  uint64_t per_gpu(int tp) const {
    return ceil_div(split, tp) + replicated + embd + head + head_tied + output_norm + other;
  }
};

StageWeights stage_weights(const WeightBytes& w, const Stage& stage, int s, int pp) {
  StageWeights sw;
  for (int64_t l = stage.first_layer; l < stage.first_layer + stage.n_layers; ++l) {
    sw.split += w.layer_split[l];
    sw.replicated += w.layer_replicated[l];
  }
  if (s == 0) sw.embd = w.token_embd;
  if (s == pp - 1) {
    sw.output_norm = w.output_norm;
    if (!w.tied_output) sw.head = w.output;
    if (w.tied_output && pp > 1) sw.head_tied = w.token_embd;
  }
  sw.other = w.other;
  return sw;
}

std::string describe_weights(const StageWeights& sw, const Stage& stage, int tp) {
  std::string text = fmt::format("layers {}..{}: matrices {} / tp {} + norms {}", stage.first_layer,
                                 stage.first_layer + stage.n_layers - 1, format_size(sw.split), tp,
                                 format_size(sw.replicated));
  if (sw.embd) text += fmt::format(" + token_embd {}", format_size(sw.embd));
  if (sw.head) {
    text +=
        fmt::format(" + output {}{}", format_size(sw.head), tp > 1 ? " (whole on every rank)" : "");
  }
  if (sw.head_tied) text += fmt::format(" + tied head (token_embd) {}", format_size(sw.head_tied));
  if (sw.output_norm) text += fmt::format(" + output_norm {}", format_size(sw.output_norm));
  if (sw.other) text += fmt::format(" + other {}", format_size(sw.other));
  return text + fmt::format(" = {}", format_size(sw.per_gpu(tp)));
}

// Float activations of one pass of T rows on a rank holding 1/tp of the heads and FFN
// columns, plus the logits of up to R rows: hidden + normed states (2 T n_embd), queries and
// attention output (2 T q_dim/tp), K and V (2 T kv_dim/tp), FFN gate and up (2 T n_ff/tp),
// head inputs (R n_embd), logits (R n_vocab: the head is not split, every rank sizes its
// buffers for all of it). Under tensor parallelism, three half-precision copies of the hidden
// rows for the sums of the output projections (the pulled sums' two slots and the NCCL
// buffer: 3 T n_embd halves).
uint64_t tp_sum_bytes(const ModelConfig& c, int tp, int64_t t) {
  return tp > 1 ? 3ull * t * c.n_embd * 2 : 0;
}

uint64_t activation_bytes(const ModelConfig& c, int tp, int64_t t, int64_t r) {
  const uint64_t floats = 2ull * t * c.n_embd + 2ull * t * (c.q_dim() / tp) +
                          2ull * t * (c.kv_dim() / tp) + 2ull * t * (c.n_ff / tp) +
                          1ull * r * c.n_embd + 1ull * r * c.n_vocab;
  return floats * sizeof(float) + tp_sum_bytes(c, tp, t);
}

LayoutPlan plan_layout(const PlanRequest& req, const PlanReport& report, int tp, int pp,
                       int replicas) {
  const ModelConfig& c = req.config;
  LayoutPlan p;
  p.tp = tp;
  p.pp = pp;
  p.replicas = replicas;
  if (const std::string problem = tensor_parallel_problem(c, req.weights.column_split, tp);
      !problem.empty()) {
    p.impossible_reason = fmt::format("tp {} does not divide {}", tp, problem);
    return p;
  }
  if (pp > c.n_layer) {
    p.impossible_reason = fmt::format("pp {} exceeds the {} layers", pp, c.n_layer);
    return p;
  }
  if ((c.kv_dim() / tp) % traits(req.kv_type).block_elems != 0) {
    p.impossible_reason = fmt::format(
        "a {} KV cache needs the {} K/V values per rank to be whole "
        "blocks of {}",
        type_name(req.kv_type), c.kv_dim() / tp, traits(req.kv_type).block_elems);
    return p;
  }
  const uint64_t kv_row = row_bytes(req.kv_type, static_cast<size_t>(c.kv_dim() / tp));
  const std::vector<Stage> stages = split_layers(c.n_layer, pp);
  p.max_layers_per_stage = stages.front().n_layers;
  p.seqs_per_replica = (req.concurrency + replicas - 1) / replicas;
  p.kv_tokens_needed = p.seqs_per_replica * report.tokens_per_sequence;
  const int64_t logit_rows = std::min<int64_t>(p.seqs_per_replica, req.max_batch_tokens);
  p.activations_per_gpu = activation_bytes(c, tp, req.max_batch_tokens, logit_rows);
  p.budget_per_gpu =
      static_cast<uint64_t>(static_cast<double>(req.gpu_memory_bytes) * req.gpu_memory_utilization);

  // The tightest stage decides how many tokens a replica holds.
  int64_t best_tokens = -1;
  StageWeights tight_weights;
  for (int s = 0; s < pp; ++s) {
    const StageWeights sw = stage_weights(req.weights, stages[s], s, pp);
    const uint64_t weights = sw.per_gpu(tp);
    const int64_t free_bytes =
        static_cast<int64_t>(p.budget_per_gpu) -
        static_cast<int64_t>(weights + p.activations_per_gpu + req.workspace_bytes);
    const uint64_t per_token = 2ull * stages[s].n_layers * kv_row;
    int64_t tokens = 0;
    if (free_bytes > 0) {
      tokens = static_cast<int64_t>(static_cast<uint64_t>(free_bytes) / per_token);
      tokens = tokens / req.kv_block_size * req.kv_block_size;
    }
    if (best_tokens < 0 || tokens < best_tokens ||
        (tokens == best_tokens && free_bytes < p.free_kv_bytes_per_gpu)) {
      best_tokens = tokens;
      p.tight_stage = s;
      p.weights_per_gpu = weights;
      p.free_kv_bytes_per_gpu = free_bytes;
      p.kv_bytes_per_token_per_gpu = per_token;
      tight_weights = sw;
    }
  }
  p.kv_tokens_per_replica = best_tokens;
  p.max_concurrency = best_tokens / report.tokens_per_sequence * replicas;
  p.fits = p.free_kv_bytes_per_gpu > 0 && p.kv_tokens_per_replica >= p.kv_tokens_needed;

  const Stage& st = stages[p.tight_stage];
  auto& steps = p.steps;
  steps.push_back(
      fmt::format("stages: {} layers over pp {} -> at most {} layers per stage; the "
                  "tightest GPU is on stage {}",
                  c.n_layer, pp, p.max_layers_per_stage, p.tight_stage));
  steps.push_back("weights/GPU: " + describe_weights(tight_weights, st, tp));
  const std::string tp_sums =
      tp > 1 ? fmt::format(" + tp sums 2 B x 3 x {} rows x {}", req.max_batch_tokens, c.n_embd)
             : std::string();
  steps.push_back(fmt::format(
      "activations/GPU: 4 B x ({} rows x (2x{} + 2x{}/{} + 2x{}/{} + 2x{}/{}) + {} logit rows x "
      "({} + {})){} = {}",
      req.max_batch_tokens, c.n_embd, c.q_dim(), tp, c.kv_dim(), tp, c.n_ff, tp, logit_rows,
      c.n_embd, c.n_vocab, tp_sums, format_size(p.activations_per_gpu)));
  steps.push_back(fmt::format("budget/GPU: {} x {:.2f} = {}", format_size(req.gpu_memory_bytes),
                              req.gpu_memory_utilization, format_size(p.budget_per_gpu)));
  steps.push_back(fmt::format(
      "free for KV: {} - {} - {} - workspace {} = {}", format_size(p.budget_per_gpu),
      format_size(p.weights_per_gpu), format_size(p.activations_per_gpu),
      format_size(req.workspace_bytes),
      p.free_kv_bytes_per_gpu < 0
          ? fmt::format("-{}", format_size(static_cast<uint64_t>(-p.free_kv_bytes_per_gpu)))
          : format_size(static_cast<uint64_t>(p.free_kv_bytes_per_gpu))));
  steps.push_back(fmt::format(
      "KV/token/GPU: 2 (K,V) x {} layers x {} B ({}/{} values of {}) = {} B", st.n_layers, kv_row,
      c.kv_dim(), tp, type_name(req.kv_type), p.kv_bytes_per_token_per_gpu));
  if (p.free_kv_bytes_per_gpu > 0) {
    steps.push_back(
        fmt::format("KV tokens/replica: {} B / {} B = {} tokens, whole blocks of {}: {}",
                    p.free_kv_bytes_per_gpu, p.kv_bytes_per_token_per_gpu,
                    static_cast<uint64_t>(p.free_kv_bytes_per_gpu) / p.kv_bytes_per_token_per_gpu,
                    req.kv_block_size, p.kv_tokens_per_replica));
  } else {
    steps.push_back("KV tokens/replica: 0 (weights, activations and workspace exceed the budget)");
  }
  steps.push_back(fmt::format(
      "needed/replica: ceil({} / {} replicas) = {} sequences x {} tokens = {}", req.concurrency,
      replicas, p.seqs_per_replica, report.tokens_per_sequence, p.kv_tokens_needed));
  steps.push_back(
      fmt::format("{}: {} >= {} is {}; max concurrency at {} tokens: floor({} / {}) x "
                  "{} = {}",
                  p.fits ? "fits" : "does not fit", p.kv_tokens_per_replica, p.kv_tokens_needed,
                  p.fits ? "true" : "false", req.n_ctx, p.kv_tokens_per_replica,
                  report.tokens_per_sequence, replicas, p.max_concurrency));
  return p;
}

}  // namespace

uint64_t WeightBytes::total() const {
  uint64_t sum = token_embd + output + output_norm + other;
  for (uint64_t b : layer_split) sum += b;
  for (uint64_t b : layer_replicated) sum += b;
  return sum;
}

std::string format_size(uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= (1ull << 30)) return fmt::format("{:.2f} GiB", b / double(1ull << 30));
  if (bytes >= (1ull << 20)) return fmt::format("{:.2f} MiB", b / double(1ull << 20));
  if (bytes >= (1ull << 10)) return fmt::format("{:.2f} KiB", b / double(1ull << 10));
  return fmt::format("{} B", bytes);
}

Result<WeightBytes> group_weight_bytes(std::span<const NamedTensorBytes> tensors,
                                       const ModelConfig& config) {
  WeightBytes w;
  w.layer_split.assign(static_cast<size_t>(config.n_layer), 0);
  w.layer_replicated.assign(static_cast<size_t>(config.n_layer), 0);
  bool has_output = false;
  for (const NamedTensorBytes& t : tensors) {
    if (t.name == "token_embd.weight") {
      w.token_embd += t.n_bytes;
    } else if (t.name == "output.weight") {
      w.output += t.n_bytes;
      has_output = true;
    } else if (t.name == "output_norm.weight") {
      w.output_norm += t.n_bytes;
    } else if (const std::optional<int64_t> layer = layer_of(t.name)) {
      if (*layer < 0 || *layer >= config.n_layer) {
        return make_error(StatusCode::kInvalidArgument,
                          "tensor '{}' names layer {} but the model has {} layers", t.name, *layer,
                          config.n_layer);
      }
      const bool replicated =
          t.name.find("_norm") != std::string::npos || t.name.ends_with(".bias");
      (replicated ? w.layer_replicated : w.layer_split)[*layer] += t.n_bytes;
      if (t.name.ends_with(".attn_output.weight") || t.name.ends_with(".ffn_down.weight")) {
        if (t.cols < 1) {
          return make_error(StatusCode::kInvalidArgument,
                            "tensor '{}' has no row length; the tensor-parallel split needs it",
                            t.name);
        }
        w.column_split.push_back({t.name, t.cols, t.type});
      }
    } else {
      w.other += t.n_bytes;
    }
  }
  w.tied_output = !has_output;
  return w;
}

Result<PlanReport> make_plan(const PlanRequest& req) {
  LS_RETURN_IF_ERROR(validate_config(req.config));
  if (req.gpus < 1 || req.gpus > kMaxGpus) {
    return make_error(StatusCode::kInvalidArgument, "--gpus = {} must be in [1, {}]", req.gpus,
                      kMaxGpus);
  }
  if (req.n_ctx < 1 || req.n_ctx > kMaxTokens || req.concurrency < 1 ||
      req.concurrency > kMaxTokens) {
    return make_error(StatusCode::kInvalidArgument,
                      "context ({}) and concurrency ({}) must be positive", req.n_ctx,
                      req.concurrency);
  }
  if (req.gpu_memory_bytes == 0) {
    return make_error(StatusCode::kInvalidArgument, "GPU memory must be positive");
  }
  if (!(req.gpu_memory_utilization > 0.0 && req.gpu_memory_utilization <= 1.0)) {
    return make_error(StatusCode::kInvalidArgument, "GPU memory utilization {} must be in (0, 1]",
                      req.gpu_memory_utilization);
  }
  if (req.kv_type != TensorType::F16 && req.kv_type != TensorType::Q8_0 &&
      req.kv_type != TensorType::F32) {
    return make_error(StatusCode::kUnsupported, "KV cache type {} is not supported (f16, q8_0)",
                      type_name(req.kv_type));
  }
  if (req.kv_block_size < 1 || req.max_batch_tokens < 1) {
    return make_error(StatusCode::kInvalidArgument, "block size and batch tokens must be positive");
  }
  if (req.weights.layer_split.size() != static_cast<size_t>(req.config.n_layer) ||
      req.weights.layer_replicated.size() != static_cast<size_t>(req.config.n_layer)) {
    return make_error(StatusCode::kInvalidArgument, "weight bytes cover {} layers, expected {}",
                      req.weights.layer_split.size(), req.config.n_layer);
  }
  PlanReport report;
  report.request = req;
  report.kv_bytes_per_token =
      2ull * req.config.n_layer * row_bytes(req.kv_type, static_cast<size_t>(req.config.kv_dim()));
  report.tokens_per_sequence =
      (req.n_ctx + req.kv_block_size - 1) / req.kv_block_size * req.kv_block_size;
  report.kv_bytes_per_sequence = report.kv_bytes_per_token * report.tokens_per_sequence;

  for (int tp = 1; tp <= req.gpus; ++tp) {
    if (req.gpus % tp != 0) continue;
    for (int pp = 1; pp <= req.gpus / tp; ++pp) {
      if ((req.gpus / tp) % pp != 0) continue;
      report.layouts.push_back(plan_layout(req, report, tp, pp, req.gpus / tp / pp));
    }
  }
  for (size_t i = 0; i < report.layouts.size(); ++i) {
    const LayoutPlan& l = report.layouts[i];
    if (!l.impossible_reason.empty() || !l.fits) continue;
    if (!report.recommended) {
      report.recommended = i;
      continue;
    }
    const LayoutPlan& best = report.layouts[*report.recommended];
    if (l.replicas > best.replicas || (l.replicas == best.replicas && l.pp < best.pp)) {
      report.recommended = i;
    }
  }
  return report;
}

Result<uint64_t> parse_byte_size(std::string_view text) {
  std::string s;
  for (char ch : text) {
    if (ch != ' ') s += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  }
  double value = 0.0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end == s.data() || !(value > 0.0) || !std::isfinite(value)) {
    return make_error(StatusCode::kInvalidArgument,
                      "'{}' is not a memory size (examples: 141GB, 80GiB, 24G)", text);
  }
  const std::string_view suffix(end, s.data() + s.size() - end);
  struct Unit {
    std::string_view name;
    double bytes;
  };
  static constexpr Unit kUnits[] = {{"", 1.0},
                                    {"B", 1.0},
                                    {"KB", 1e3},
                                    {"MB", 1e6},
                                    {"GB", 1e9},
                                    {"TB", 1e12},
                                    {"K", 1024.0},
                                    {"KIB", 1024.0},
                                    {"M", 1048576.0},
                                    {"MIB", 1048576.0},
                                    {"G", 1073741824.0},
                                    {"GIB", 1073741824.0},
                                    {"T", 1099511627776.0},
                                    {"TIB", 1099511627776.0}};
  for (const Unit& unit : kUnits) {
    if (unit.name == suffix) {
      const double bytes = value * unit.bytes;
      if (bytes > 1e18) break;
      return static_cast<uint64_t>(bytes);
    }
  }
  return make_error(StatusCode::kInvalidArgument,
                    "'{}': unknown unit '{}' (use B, KB, MB, GB, TB or KiB, MiB, GiB, TiB)", text,
                    suffix);
}

}  // namespace llamaserve
