// llamaserve synth: writes a model of a known shape with random weights and a real tokenizer.
//
//   llamaserve synth --shape llama2-7b|llama2-13b|llama2-70b|llama3-8b|tiny
//                    --type f16|q8_0|q4_k_m -o FILE [--seed S] [--threads N] [--vocab FILE]
//     --vocab: GGUF whose tokenizer is copied. Default: vocab-llama2-spm.gguf (LLaMA 2 shapes
//     and tiny) or vocab-llama3-bpe.gguf (llama3-8b), from share/llamaserve/ (installed with
//     the binary, and in the build directory) or a source tree's tests/fixtures/, searched
//     upwards from the binary and from the working directory (find_default_vocab).
// For benchmarks and memory plans of shapes too large to download; the text is noise.
#include <cstdio>

#include "cli/command.h"
#include "cli/synthetic_model.h"
#include "model/importers/file_types.h"
#include "model/importers/synth_model.h"
#include "model/shapes.h"

namespace llamaserve::cli {
namespace {

struct SynthCliOptions {
  std::string progress = "auto";
  SynthOptions synth;
};

Status run_synth(SynthCliOptions& o) {
  LS_ASSIGN_OR_RETURN(o.synth.progress, parse_progress_style(o.progress));
  LS_ASSIGN_OR_RETURN(const ModelShape* shape, find_model_shape(o.synth.shape));
  LS_RETURN_IF_ERROR(parse_file_type(o.synth.type).status());
  if (o.synth.vocab_path.empty()) {
    LS_ASSIGN_OR_RETURN(o.synth.vocab_path, find_default_vocab(shape->vocab_file, "--vocab"));
  }
  LS_ASSIGN_OR_RETURN(ConvertSummary s, write_synthetic_model(o.synth));
  fmt::print("wrote {} ({}, {}): {} tensors, {:.2f} MiB of tensor data, tokenizer {} ({})\n",
             o.synth.output_path, shape->name, o.synth.type, s.n_tensors,
             static_cast<double>(s.n_bytes) / (1 << 20), s.tokenizer_model, o.synth.vocab_path);
  for (const std::string& note : s.notes) fmt::print("  note: {}\n", note);
  return Status::ok();
}

std::function<int()> setup_synth(CLI::App& sub) {
  auto o = std::make_shared<SynthCliOptions>();
  sub.add_option("--shape", o->synth.shape, "model shape: " + model_shape_names())->required();
  sub.add_option("--type", o->synth.type, "file type: " + file_type_names())->capture_default_str();
  sub.add_option("-o,--output", o->synth.output_path, "GGUF file to write")->required();
  sub.add_option("--seed", o->synth.seed, "random seed")->capture_default_str();
  sub.add_option("--vocab", o->synth.vocab_path, "GGUF whose tokenizer is copied");
  sub.add_option("-t,--threads", o->synth.threads, "threads (0 = all cores)")
      ->capture_default_str();
  sub.add_option("--progress", o->progress, "auto, bar, lines or none")->capture_default_str();
  return [o] {
    Status status = run_synth(*o);
    if (!status.is_ok()) {
      std::fprintf(stderr, "llamaserve synth: %s\n", status.to_string().c_str());
      return 1;
    }
    return 0;
  };
}

}  // namespace

LLAMASERVE_COMMAND(synth, "synth", "Write a random-weight model of a known shape (benchmarks)",
                   setup_synth);

}  // namespace llamaserve::cli
