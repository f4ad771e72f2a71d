// llamaserve quantize: re-encodes a GGUF model's tensors with a quantized file type.
//
//   llamaserve quantize IN.gguf OUT.gguf TYPE [--threads N] [--progress auto|bar|lines|none]
//     TYPE: q8_0, q4_0, q4_1, q4_k_m, q5_k_m, q6_k (also f16, bf16, f32). The per-tensor mix
//     (norms stay F32, Q6_K for embeddings / head and some attn_v / ffn_down in the K "medium"
//     mixes, 32-block fallbacks for rows that are not whole 256-element blocks) is described
//     in docs/tools.md and src/model/importers/file_types.h.
// Metadata is copied with general.file_type updated. Prints a summary on stdout; on any
// error prints it on stderr, exits 1, and leaves no file at OUT.gguf.
#include <cstdio>

#include "cli/command.h"
#include "model/importers/file_types.h"
#include "model/importers/quantize_model.h"

namespace llamaserve::cli {
namespace {

struct QuantizeCliOptions {
  std::string input;
  std::string output;
  std::string progress = "auto";
  QuantizeOptions quantize;
};

Status run_quantize(QuantizeCliOptions& o) {
  LS_ASSIGN_OR_RETURN(o.quantize.progress, parse_progress_style(o.progress));
  LS_ASSIGN_OR_RETURN(QuantizeSummary s, quantize_model(o.input, o.output, o.quantize));
  const auto mib = [](uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); };
  fmt::print("wrote {} ({}): {} tensors, {:.2f} MiB of tensor data (input {:.2f} MiB, {:.2f}x)\n",
             o.output, o.quantize.type, s.n_tensors, mib(s.output_bytes), mib(s.input_bytes),
             s.output_bytes > 0 ? static_cast<double>(s.input_bytes) / s.output_bytes : 0.0);
  for (const auto& [type, count] : s.tensors_by_type) {
    fmt::print("  {:<5} {} tensors\n", type_name(type), count);
  }
  for (const std::string& note : s.notes) fmt::print("  note: {}\n", note);
  return Status::ok();
}

std::function<int()> setup_quantize(CLI::App& sub) {
  auto o = std::make_shared<QuantizeCliOptions>();
  sub.add_option("input", o->input, "GGUF model to read")->required();
  sub.add_option("output", o->output, "GGUF file to write")->required();
  sub.add_option("type", o->quantize.type, "file type: " + file_type_names())->required();
  sub.add_option("-t,--threads", o->quantize.threads, "threads (0 = all cores)")
      ->capture_default_str();
  sub.add_option("--progress", o->progress, "auto, bar, lines or none")->capture_default_str();
  return [o] {
    Status status = run_quantize(*o);
    if (!status.is_ok()) {
      std::fprintf(stderr, "llamaserve quantize: %s\n", status.to_string().c_str());
      return 1;
    }
    return 0;
  };
}

}  // namespace

LLAMASERVE_COMMAND(quantize, "quantize", "Quantize a GGUF model (q8_0, q4_0, q4_1, q4_k_m, ...)",
                   setup_quantize);

}  // namespace llamaserve::cli
