// llamaserve bench: prompt and decode speed of a model on one device, measured on the Executor
// directly (no engine, scheduler or sampler, so the figures are the ceiling an engine can
// approach), against the memory bandwidth measured on the same device at the start.
//
//   llamaserve bench (-m MODEL | --synth SHAPE:TYPE [--synth-vocab F]) [-p 512] [-n 128]
//                    [-b 1,16,64,256] [--batch-prompt 128] [--device cpu|cuda:N] [--reps 3]
//                    [--with-prompts] [--json] [--json-file F] [--markdown-file F]
//
// --synth llama2-70b:f16 synthesizes the model into memory instead of reading a file
// (model/importers/synth_memory.h): shapes larger than the disk, made on all cores.
//
// Cases:
//   prompt    one sequence, a prompt of -p tokens in one forward pass (logits of the last row)
//   decode    one sequence, -n steps of one token from an empty cache
//   batch B   B sequences of --batch-prompt tokens (prefilled, not timed), then -n steps of
//             B rows (one token per sequence): aggregate tokens per second
//   batch B with prompts (--with-prompts): the same B sequences' prompts (in passes of up to
//             max(512, -p) rows, as a server's step budget) and then their -n steps, timed
//             together: generated tokens per second with the prompt work included, the figure a
//             server running the same requests can approach
// Every case runs once as warm-up (CUDA graphs get captured, pages touched), then --reps
// times; the median is reported. Token ids are random: the speed does not depend on them.
// Achieved bandwidth counts the weights every step reads plus the KV cache its attention reads.
// On a GPU every step draws greedy tokens there and copies only their ids back, as the engine
// does (--host-logits copies the logits instead). --profile-steps N runs N more steps of one
// case inside a profiler capture range, for `ncu --profile-from-start off`, --profile-prompt
// one more prompt pass (scripts/ncu_breakdown.py turns its CSV into a per-kernel table).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend/batch.h"
#include "cli/command.h"
#include "cli/synthetic_model.h"
#include "executor/profiler_range.h"
#include "model/weights.h"
#include "server/options.h"
#include "service/layout_factory.h"
#include "service/load_progress.h"
#include "service/model_service.h"

namespace llamaserve::cli {
namespace {

struct BenchOptions {
  // The model's file (or "synthetic SHAPE:TYPE"), devices, layout and kernel settings; the
  // KV and batch sizes come from the cases.
  ModelSpec model;
  std::string synth;        // SHAPE:TYPE, synthesized in memory instead of -m
  std::string synth_vocab;  // tokenizer of --synth (default: find_default_vocab)
  int32_t prompt_tokens = 512;
  int32_t decode_tokens = 128;
  std::vector<int32_t> batches = {1, 16, 64, 256};
  int32_t batch_prompt_tokens = 128;
  // Also time each batch case with its prompts (the "with prompts" cases).
  bool with_prompts = false;
  int reps = 3;
  bool json = false;
  std::string json_file;      // also write the JSON here
  std::string markdown_file;  // also write a markdown table here
  // Copy every step's logits to the host instead of drawing greedy tokens on the device.
  bool host_logits = false;
  // Nsight Compute capture range: this many decode steps of the batch case of profile_batch
  // sequences (or, where -b does not list it and profile_batch is 1, of the decode case), after
  // its timed runs.
  int32_t profile_steps = 0;
  int32_t profile_batch = 1;
  // Nsight Compute capture range: one more prompt pass after the prompt case's timed runs.
  bool profile_prompt = false;
};

// Bytes a decode step reads for the weights (every matrix but the embedding table, whose one
// row per token is negligible) and their multiply-adds per token.
struct ModelTraffic {
  uint64_t weight_bytes = 0;
  uint64_t matmul_params = 0;
};

ModelTraffic model_traffic(const LoadedModel& model) {
  ModelTraffic t;
  auto add = [&t](const QTensor& q) {
    t.weight_bytes += q.n_bytes;
    if (q.shape.size() == 2) t.matmul_params += static_cast<uint64_t>(q.rows() * q.cols());
  };
  for (const LayerWeights& l : model.weights.layers) {
    for (const QTensor* q :
         {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_norm, &l.w_gate, &l.w_up, &l.w_down}) {
      add(*q);
    }
  }
  add(model.weights.output_norm);
  add(model.weights.output);
  return t;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Sequences of the benchmark: sequence 0 (the prompt and batch-1 decode cases) owns blocks
// [0, first_seq_blocks), sequence s > 0 the next other_seq_blocks blocks each.
class BenchRunner {
 public:
  BenchRunner(Executor& executor, int32_t first_seq_blocks, int32_t other_seq_blocks,
              int32_t max_batch_tokens, bool sample_on_device)
      : executor_(executor),
        sample_on_device_(sample_on_device),
        block_size_(executor.kv_info().block_size),
        blocks_per_seq_(std::max(first_seq_blocks, other_seq_blocks)),
        first_seq_blocks_(first_seq_blocks),
        other_seq_blocks_(other_seq_blocks),
        max_batch_tokens_(max_batch_tokens),
        n_vocab_(executor.config().n_vocab),
        rng_(1234) {}

  // Prompts of `length` tokens for sequences [0, n_seqs), as few passes as max_batch_tokens
  // allows, logits of each sequence's last row.
  Status prefill(int32_t n_seqs, int32_t length) {
    const int32_t seqs_per_pass = std::max(1, max_batch_tokens_ / std::max(length, 1));
    for (int32_t first = 0; first < n_seqs; first += seqs_per_pass) {
      const int32_t count = std::min(seqs_per_pass, n_seqs - first);
      if (length > max_batch_tokens_) {
        // One sequence at a time, in chunks.
        for (int32_t start = 0; start < length; start += max_batch_tokens_) {
          const int32_t chunk = std::min(max_batch_tokens_, length - start);
          begin_batch({first}, start + chunk);
          for (int32_t i = 0; i < chunk; ++i) add_row(0, start + i);
          batch_.logit_rows = {chunk - 1};
          LS_RETURN_IF_ERROR(run());
        }
        continue;
      }
      std::vector<int32_t> seqs(static_cast<size_t>(count));
      for (int32_t i = 0; i < count; ++i) seqs[static_cast<size_t>(i)] = first + i;
      begin_batch(seqs, length);
      for (int32_t s = 0; s < count; ++s) {
        for (int32_t p = 0; p < length; ++p) add_row(s, p);
        batch_.logit_rows.push_back((s + 1) * length - 1);
      }
      LS_RETURN_IF_ERROR(run());
    }
    return Status::ok();
  }

  // One decode step: a token at position `position` for each of sequences [0, n_seqs).
  Status decode_step(int32_t n_seqs, int32_t position) {
    std::vector<int32_t> seqs(static_cast<size_t>(n_seqs));
    for (int32_t i = 0; i < n_seqs; ++i) seqs[static_cast<size_t>(i)] = i;
    begin_batch(seqs, position + 1);
    for (int32_t s = 0; s < n_seqs; ++s) {
      add_row(s, position);
      batch_.logit_rows.push_back(s);
    }
    return run();
  }

 private:
  void begin_batch(const std::vector<int32_t>& seqs, int32_t length) {
    batch_.clear();
    batch_.blocks_per_seq = blocks_per_seq_;
    for (int32_t seq : seqs) {
      const int32_t first_block = seq == 0 ? 0 : first_seq_blocks_ + (seq - 1) * other_seq_blocks_;
      for (int32_t i = 0; i < blocks_per_seq_; ++i) {
        const bool used = i * block_size_ < length;
        batch_.block_tables.push_back(used ? first_block + i : -1);
      }
      batch_.seq_lengths.push_back(length);
    }
  }
  void add_row(int32_t seq_index, int32_t position) {
    batch_.tokens.push_back(static_cast<int32_t>(rng_() % static_cast<uint64_t>(n_vocab_)));
    batch_.positions.push_back(position);
    batch_.seq_index.push_back(seq_index);
  }
  // Greedy tokens drawn on the device (only their ids come back, as in the engine), or the
  // logits copied to the host.
  Status run() {
    if (sample_on_device_) {
      sampling_.assign(batch_.logit_rows.size(), RowSampling{});
      tokens_.resize(batch_.logit_rows.size());
      return executor_.forward_sampled(batch_, sampling_, tokens_, {});
    }
    logits_.resize(batch_.logit_rows.size() * static_cast<size_t>(n_vocab_));
    return executor_.forward(batch_, logits_);
  }

  Executor& executor_;
  bool sample_on_device_;
  int32_t block_size_;
  int32_t blocks_per_seq_;  // table width
  int32_t first_seq_blocks_;
  int32_t other_seq_blocks_;
  int32_t max_batch_tokens_;
  int64_t n_vocab_;
  std::mt19937_64 rng_;
  Batch batch_;
  std::vector<float> logits_;
  std::vector<RowSampling> sampling_;
  std::vector<int32_t> tokens_;
};

using Clock = std::chrono::steady_clock;

// Median seconds of `fn` over reps runs after one warm-up run.
template <class Fn>
Result<double> time_median(int reps, Fn&& fn) {
  LS_RETURN_IF_ERROR(fn());
  std::vector<double> seconds;
  for (int i = 0; i < reps; ++i) {
    const auto start = Clock::now();
    LS_RETURN_IF_ERROR(fn());
    seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  return median(std::move(seconds));
}

struct CaseResult {
  std::string name;
  int32_t sequences = 1;
  int64_t tokens = 0;  // timed tokens
  double seconds = 0;
  double bytes = 0;  // weight + KV bytes read in the timed part (0: not bandwidth-bound)
  double flops = 0;  // matmul FLOPs of the timed part
};

struct BenchReport {
  const BenchOptions& options;
  DeviceChoice device;
  std::string executor;
  double copy_bps = 0;
  uint64_t weight_bytes = 0;
  double kv_bytes_per_token = 0;
  std::vector<CaseResult> cases;
  bool device_sampling = false;
};

const char* method(const BenchReport& b) {
  return b.device_sampling
             ? "Executor::forward_sampled directly (the engine-free ceiling: no scheduler; greedy "
               "tokens drawn on the device, only their ids copied to the host every step)"
             : "Executor::forward directly (the engine-free ceiling: no scheduler, no sampling; "
               "logits are copied to the host every step)";
}

double tokens_per_s(const CaseResult& r) { return static_cast<double>(r.tokens) / r.seconds; }
// Per token of one sequence: per step for decode cases, per prompt token for the prompt.
double ms_per_token(const CaseResult& r) {
  return 1e3 * r.seconds / (static_cast<double>(r.tokens) / r.sequences);
}
double gbps(const CaseResult& r) { return r.bytes / r.seconds / 1e9; }
double pct_of_copy(const CaseResult& r, double copy_bps) {
  return 100.0 * r.bytes / r.seconds / copy_bps;
}

nlohmann::json to_json(const BenchReport& b) {
  nlohmann::json out;
  const LayoutSpec& layout = b.options.model.layout;
  out["model"] = b.options.model.path;
  out["device"] = b.device.name();
  out["devices"] = layout.device;
  out["tensor_parallel"] = layout.tensor_parallel;
  out["pipeline_parallel"] = layout.pipeline_parallel;
  out["micro_batches"] = layout.micro_batches;
  out["executor"] = b.executor;
  out["method"] = method(b);
  out["reps"] = b.options.reps;
  out["copy_bandwidth_gbps"] = b.copy_bps / 1e9;
  out["weight_bytes_per_token"] = b.weight_bytes;
  out["kv_bytes_per_token"] = b.kv_bytes_per_token;
  nlohmann::json cases = nlohmann::json::array();
  for (const CaseResult& r : b.cases) {
    nlohmann::json c;
    c["name"] = r.name;
    c["sequences"] = r.sequences;
    c["tokens"] = r.tokens;
    c["seconds"] = r.seconds;
    c["tokens_per_s"] = tokens_per_s(r);
    c["ms_per_token"] = ms_per_token(r);
    c["tflops"] = r.flops / r.seconds / 1e12;
    if (r.bytes > 0) {
      c["gbps"] = gbps(r);
      c["pct_of_copy"] = pct_of_copy(r, b.copy_bps);
    }
    cases.push_back(c);
  }
  out["cases"] = cases;
  return out;
}

std::string header(const BenchReport& b) {
  return fmt::format(
      "model {} on {}\nexecutor: {}\nmethod: {}\ncopy bandwidth {:.1f} GB/s (read + write); "
      "weights read per step {:.3f} GB; KV per token of context {:.3f} MB; median of {}\n",
      b.options.model.path, b.options.model.layout.device, b.executor, method(b), b.copy_bps / 1e9,
      static_cast<double>(b.weight_bytes) / 1e9, b.kv_bytes_per_token / 1e6, b.options.reps);
}

std::string text_table(const BenchReport& b) {
  std::string out = header(b) + "\n";
  out += fmt::format("{:<22} {:>7} {:>9} {:>10} {:>8} {:>8} {:>8} {:>7}\n", "case", "tokens",
                     "seconds", "tok/s", "ms/tok", "TFLOP/s", "GB/s", "%copy");
  for (const CaseResult& r : b.cases) {
    out += fmt::format("{:<22} {:>7} {:>9.4f} {:>10.1f} {:>8.3f} {:>8.2f} ", r.name, r.tokens,
                       r.seconds, tokens_per_s(r), ms_per_token(r), r.flops / r.seconds / 1e12);
    out += r.bytes > 0 ? fmt::format("{:>8.1f} {:>6.1f}%\n", gbps(r), pct_of_copy(r, b.copy_bps))
                       : fmt::format("{:>8} {:>7}\n", "-", "-");
  }
  return out;
}

std::string markdown(const BenchReport& b) {
  std::string out;
  const std::string head = header(b);
  size_t start = 0;
  while (start < head.size()) {
    const size_t end = head.find('\n', start);
    out += "- " + head.substr(start, end - start) + "\n";
    start = end + 1;
  }
  out += "\n| case | tokens | tok/s | ms/token | TFLOP/s | GB/s | % of copy |\n";
  out += "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  for (const CaseResult& r : b.cases) {
    out += fmt::format("| {} | {} | {:.1f} | {:.3f} | {:.2f} | ", r.name, r.tokens, tokens_per_s(r),
                       ms_per_token(r), r.flops / r.seconds / 1e12);
    out += r.bytes > 0 ? fmt::format("{:.1f} | {:.1f}% |\n", gbps(r), pct_of_copy(r, b.copy_bps))
                       : std::string("- | - |\n");
  }
  return out;
}

Status write_file(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return make_error(StatusCode::kIo, "cannot write {}", path);
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) return make_error(StatusCode::kIo, "error writing {}", path);
  return Status::ok();
}

Status run_bench(const BenchOptions& o) {
  if (o.prompt_tokens < 1 || o.decode_tokens < 1 || o.batch_prompt_tokens < 1 || o.reps < 1) {
    return Status(StatusCode::kInvalidArgument, "-p, -n, --batch-prompt and --reps must be >= 1");
  }
  for (int32_t b : o.batches) {
    if (b < 1) return make_error(StatusCode::kInvalidArgument, "batch size {} must be >= 1", b);
  }
  const LayoutSpec& layout = o.model.layout;
  LS_ASSIGN_OR_RETURN(const std::vector<DeviceChoice> devices, parse_devices(layout.device));
  const DeviceChoice device = devices.front();
  // The layout before anything is measured or loaded (create_executor checks it again).
  const int per_replica = layout.tensor_parallel * layout.pipeline_parallel;
  if (layout.tensor_parallel < 1 || layout.pipeline_parallel < 1 ||
      (device.kind == DeviceChoice::Kind::kCuda &&
       static_cast<int>(devices.size()) != per_replica)) {
    return make_error(StatusCode::kInvalidArgument,
                      "--tp {} x --pp {} need {} devices; --devices '{}' lists {}",
                      layout.tensor_parallel, layout.pipeline_parallel, per_replica, layout.device,
                      devices.size());
  }
  if ((o.profile_steps > 0 || o.profile_prompt) && device.kind != DeviceChoice::Kind::kCuda) {
    return make_error(StatusCode::kInvalidArgument,
                      "--profile-steps and --profile-prompt mark a capture range for a GPU "
                      "profiler: they need a CUDA device");
  }
  // The copy first: on a GPU the executor then takes most of the memory. Several GPUs read
  // their weights in parallel: the ceiling is the sum of their copy bandwidths.
  const bool cuda = device.kind == DeviceChoice::Kind::kCuda;
  double copy_bps = 0.0;
  for (const DeviceChoice& d : devices) {
    LS_ASSIGN_OR_RETURN(const double bps,
                        measure_copy_bandwidth(d, cuda ? 4ull << 30 : 256ull << 20, cuda ? 10 : 3));
    copy_bps += bps;
  }

  LS_ASSIGN_OR_RETURN(std::shared_ptr<const LoadedModel> model,
                      o.synth.empty()
                          ? load_model_for_device(o.model.path, layout.device)
                          : synthesize_for_device(o.synth, o.synth_vocab, layout.device));
  const int32_t max_b = *std::max_element(o.batches.begin(), o.batches.end());
  // Sequence 0 runs every case; the others only the batch cases.
  constexpr int32_t kBlockSize = 16;
  auto blocks_for = [](int32_t tokens) { return (tokens + kBlockSize - 1) / kBlockSize; };
  // (The profiled steps follow a case's timed ones.)
  const int32_t other_seq_blocks =
      blocks_for(o.batch_prompt_tokens + o.decode_tokens + o.profile_steps);
  const int32_t first_seq_blocks =
      std::max({blocks_for(o.prompt_tokens), blocks_for(o.decode_tokens + o.profile_steps),
                other_seq_blocks});
  // The spec's layout and kernel settings; KV, batch and context sizes from the cases.
  ExecutorOptions eo = executor_options(o.model, 0);
  eo.kv_block_size = kBlockSize;
  eo.kv_capacity_tokens =
      (first_seq_blocks + static_cast<int64_t>(max_b - 1) * other_seq_blocks) * kBlockSize;
  eo.max_batch_tokens = std::max({512, o.prompt_tokens, max_b});
  eo.max_seqs = std::max(256, max_b) + 1;  // the CUDA executor pads decode batches with one more
  eo.max_context_tokens = static_cast<int64_t>(first_seq_blocks) * kBlockSize;
  LoadProgress upload(o.model.path);  // weights going to a GPU
  eo.on_upload_progress = upload.callback();
  LS_ASSIGN_OR_RETURN(std::unique_ptr<Executor> executor, create_executor(model, eo));
  upload.finish();
  const KvCacheInfo kv = executor->kv_info();
  const double kv_bytes_per_token = static_cast<double>(kv.bytes_per_block) / kv.block_size;
  const ModelTraffic traffic = model_traffic(*model);
  const bool sample_on_device = executor->samples_on_device() && !o.host_logits;
  BenchRunner runner(*executor, first_seq_blocks, other_seq_blocks, eo.max_batch_tokens,
                     sample_on_device);

  std::vector<CaseResult> results;
  {
    CaseResult r{fmt::format("prompt {}", o.prompt_tokens), 1, o.prompt_tokens};
    LS_ASSIGN_OR_RETURN(r.seconds,
                        time_median(o.reps, [&] { return runner.prefill(1, o.prompt_tokens); }));
    r.flops = 2.0 * static_cast<double>(traffic.matmul_params) * o.prompt_tokens;
    results.push_back(r);
    if (o.profile_prompt) {
      LS_RETURN_IF_ERROR(profiler_start());
      LS_RETURN_IF_ERROR(runner.prefill(1, o.prompt_tokens));
      LS_RETURN_IF_ERROR(profiler_stop());
    }
  }
  // The profiled case: the batch case of profile_batch sequences (its contexts start at
  // --batch-prompt) where -b lists it, else the decode case.
  const bool batch_profiled =
      std::find(o.batches.begin(), o.batches.end(), o.profile_batch) != o.batches.end();
  // Decode steps at positions [start, start + n): attention reads start + t + 1 KV rows.
  auto decode_case = [&](int32_t n_seqs_case, int32_t start, std::string name,
                         bool profiled) -> Status {
    CaseResult r{std::move(name), n_seqs_case, static_cast<int64_t>(n_seqs_case) * o.decode_tokens};
    if (start > 0) LS_RETURN_IF_ERROR(runner.prefill(n_seqs_case, start));
    LS_ASSIGN_OR_RETURN(r.seconds, time_median(o.reps, [&]() -> Status {
                          for (int32_t t = 0; t < o.decode_tokens; ++t) {
                            LS_RETURN_IF_ERROR(runner.decode_step(n_seqs_case, start + t));
                          }
                          return Status::ok();
                        }));
    if (o.profile_steps > 0 && profiled) {
      // Positions past the timed runs' (which rewrote the same ones each repetition).
      LS_RETURN_IF_ERROR(profiler_start());
      for (int32_t t = 0; t < o.profile_steps; ++t) {
        LS_RETURN_IF_ERROR(runner.decode_step(n_seqs_case, start + o.decode_tokens + t));
      }
      LS_RETURN_IF_ERROR(profiler_stop());
    }
    const double kv_rows =
        static_cast<double>(n_seqs_case) * (static_cast<double>(start) * o.decode_tokens +
                                            o.decode_tokens * (o.decode_tokens + 1) / 2.0);
    r.bytes =
        static_cast<double>(traffic.weight_bytes) * o.decode_tokens + kv_rows * kv_bytes_per_token;
    r.flops = 2.0 * static_cast<double>(traffic.matmul_params) * static_cast<double>(r.tokens);
    results.push_back(r);
    return Status::ok();
  };
  // A batch case's prompts and decode steps timed together (tokens: the generated ones).
  auto with_prompts_case = [&](int32_t n_seqs_case) -> Status {
    CaseResult r{fmt::format("batch {} x {}+{} with prompts", n_seqs_case, o.batch_prompt_tokens,
                             o.decode_tokens),
                 n_seqs_case, static_cast<int64_t>(n_seqs_case) * o.decode_tokens};
    LS_ASSIGN_OR_RETURN(
        r.seconds, time_median(o.reps, [&]() -> Status {
          LS_RETURN_IF_ERROR(runner.prefill(n_seqs_case, o.batch_prompt_tokens));
          for (int32_t t = 0; t < o.decode_tokens; ++t) {
            LS_RETURN_IF_ERROR(runner.decode_step(n_seqs_case, o.batch_prompt_tokens + t));
          }
          return Status::ok();
        }));
    r.flops = 2.0 * static_cast<double>(traffic.matmul_params) * n_seqs_case *
              (o.batch_prompt_tokens + o.decode_tokens);
    results.push_back(r);
    return Status::ok();
  };
  LS_RETURN_IF_ERROR(decode_case(1, 0, "decode b1", o.profile_batch == 1 && !batch_profiled));
  for (int32_t b : o.batches) {
    LS_RETURN_IF_ERROR(
        decode_case(b, o.batch_prompt_tokens,
                    fmt::format("batch {} x {}+{}", b, o.batch_prompt_tokens, o.decode_tokens),
                    b == o.profile_batch));
    if (o.with_prompts) LS_RETURN_IF_ERROR(with_prompts_case(b));
  }

  BenchReport report{o,
                     device,
                     executor->describe(),
                     copy_bps,
                     traffic.weight_bytes,
                     kv_bytes_per_token,
                     std::move(results),
                     sample_on_device};
  if (!o.json_file.empty()) LS_RETURN_IF_ERROR(write_file(o.json_file, to_json(report).dump(2)));
  if (!o.markdown_file.empty()) LS_RETURN_IF_ERROR(write_file(o.markdown_file, markdown(report)));
  const std::string out = o.json ? to_json(report).dump(2) + "\n" : text_table(report);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return Status::ok();
}

std::function<int()> setup_bench(CLI::App& sub) {
  auto o = std::make_shared<BenchOptions>();
  CLI::Option_group* model = sub.add_option_group("model", "the model to measure (one of)");
  model->add_option("-m,--model", o->model.path, "GGUF model file");
  model
      ->add_option("--synth", o->synth,
                   "SHAPE:TYPE: synthesize a random-weight model in memory (llama2-70b:f16; "
                   "shapes: " +
                       model_shape_names() + ")")
      ->check([](const std::string& text) {
        Result<SynthSpec> spec = parse_synth_spec(text);
        return spec.is_ok() ? std::string() : spec.status().message();
      });
  model->require_option(1);
  sub.add_option("--synth-vocab", o->synth_vocab, "GGUF whose tokenizer --synth copies");
  sub.add_option("-p,--prompt-tokens", o->prompt_tokens, "prompt length of the prompt case")
      ->capture_default_str();
  sub.add_option("-n,--decode-tokens", o->decode_tokens, "tokens generated per decode case")
      ->capture_default_str();
  sub.add_option("-b,--batches", o->batches, "sequences decoding together, one case each")
      ->delimiter(',')
      ->capture_default_str();
  sub.add_option("--batch-prompt", o->batch_prompt_tokens,
                 "prompt tokens of each sequence of the batch cases")
      ->capture_default_str();
  sub.add_flag("--with-prompts", o->with_prompts,
               "also time each batch case with its prompts (prompt passes, then the decode "
               "steps): the work a server does for the same requests");
  LayoutSpec& layout = o->model.layout;
  sub.add_option("--device,--devices", layout.device,
                 "cpu, cuda:N, a CUDA device index N, or a list 0,1 for --tp/--pp")
      ->capture_default_str();
  sub.add_option("--gpu-memory-utilization", layout.gpu_memory_utilization,
                 "fraction of the GPU's memory to use (CUDA devices)")
      ->capture_default_str();
  sub.add_option("--tp", layout.tensor_parallel,
                 "tensor parallel: split every layer's heads and FFN over this many GPUs (NCCL)")
      ->capture_default_str();
  sub.add_option("--pp", layout.pipeline_parallel,
                 "pipeline parallel: consecutive layer blocks on this many GPUs")
      ->capture_default_str();
  sub.add_option("--layer-split", layout.layer_split, "layers per pipeline stage, e.g. 16,16")
      ->delimiter(',');
  sub.add_option("--micro-batches", layout.micro_batches,
                 "pipeline: micro-batches in flight per pass of several sequences (0 = one per "
                 "stage, 1 = the stages in turn)")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  sub.add_option("-t,--threads", layout.threads, "CPU threads (0 = all cores)")
      ->capture_default_str();
  server::add_cpu_isa_option(sub, layout);
  server::add_kv_cache_type_option(sub, o->model);
  sub.add_option("--reps", o->reps, "timed repetitions per case (the median is reported)")
      ->capture_default_str();
  sub.add_flag("--json", o->json, "print the results as JSON");
  sub.add_flag("--host-logits", o->host_logits,
               "copy every step's logits to the host (default: greedy tokens drawn on the GPU, "
               "only their ids copied)");
  sub.add_option("--profile-steps", o->profile_steps,
                 "decode steps run inside a profiler capture range (ncu --profile-from-start "
                 "off) after the timed runs of the batch case of --profile-batch sequences (or, "
                 "where -b does not list it, of the decode case)")
      ->check(CLI::Range(0, 64));
  sub.add_option("--profile-batch", o->profile_batch, "sequences of the profiled case")
      ->capture_default_str();
  sub.add_flag("--profile-prompt", o->profile_prompt,
               "one more prompt pass inside a profiler capture range, after the prompt case's "
               "timed runs");
  server::add_kernel_options(sub, o->model);
  sub.add_option("--json-file", o->json_file, "also write the JSON results to this file");
  sub.add_option("--markdown-file", o->markdown_file, "also write a markdown table to this file");
  return [o] {
    // The reports name the model by its path; a --synth model by its spec.
    if (!o->synth.empty()) o->model.path = "synthetic " + o->synth;
    const Status status = run_bench(*o);
    if (!status.is_ok()) {
      std::fprintf(stderr, "llamaserve bench: %s\n", status.to_string().c_str());
      return 1;
    }
    return 0;
  };
}

}  // namespace

LLAMASERVE_COMMAND(bench, "bench",
                   "Measure prompt and decode speed of a model against the device's bandwidth",
                   setup_bench);

}  // namespace llamaserve::cli
