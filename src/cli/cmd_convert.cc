// llamaserve convert: writes a GGUF llama model from another checkpoint format.
//
//   llamaserve convert HF_DIR -o OUT.gguf [--type f16|bf16|f32|q8_0] [--name NAME] [--threads N]
//     A Hugging Face directory: config.json (LlamaForCausalLM / MistralForCausalLM),
//     model.safetensors or shards with model.safetensors.index.json, and tokenizer.model
//     (SentencePiece) or tokenizer.json (byte-level BPE), with tokenizer_config.json.
//   llamaserve convert --from llama2c MODEL.bin --tokenizer TOKENIZER.bin -o OUT.gguf [...]
//     A llama2.c checkpoint and its tokenizer.bin.
// --type also accepts the quantized mixes of `llamaserve quantize` (q4_k_m, ...).
// Prints a summary on stdout; on any error prints it on stderr, exits 1, and leaves no file
// at OUT.gguf.
#include <cstdio>

#include "cli/command.h"
#include "model/importers/convert.h"
#include "model/importers/file_types.h"

namespace llamaserve::cli {
namespace {

struct ConvertCliOptions {
  std::string input;
  std::string from = "hf";
  std::string tokenizer_path;
  std::string progress = "auto";
  ConvertOptions convert;
};

void print_summary(const ConvertSummary& s, const std::string& path, const std::string& type) {
  const ModelConfig& c = s.config;
  fmt::print("wrote {} ({}): {} tensors, {:.2f} MiB of tensor data\n", path, type, s.n_tensors,
             static_cast<double>(s.n_bytes) / (1 << 20));
  fmt::print(
      "  llama: {} layers, n_embd {}, {} heads ({} KV, head_dim {}), n_ff {}, vocab {}, "
      "context {}, rope theta {}{}\n",
      c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.head_dim, c.n_ff, c.n_vocab, c.n_ctx_train,
      c.rope_theta, c.tied_output ? ", tied embeddings" : "");
  fmt::print("  tokenizer: {} (pre {})\n", s.tokenizer_model, s.tokenizer_pre);
  for (const std::string& note : s.notes) fmt::print("  note: {}\n", note);
}

Status run_convert(ConvertCliOptions& o) {
  LS_ASSIGN_OR_RETURN(o.convert.progress, parse_progress_style(o.progress));
  LS_RETURN_IF_ERROR(parse_file_type(o.convert.type).status());
  Result<ConvertSummary> summary = Status(StatusCode::kInternal, "unset");
  if (o.from == "hf") {
    if (!o.tokenizer_path.empty()) {
      return make_error(StatusCode::kInvalidArgument,
                        "--tokenizer is for --from llama2c; a Hugging Face directory holds its "
                        "own tokenizer");
    }
    summary = convert_hf_model(o.input, o.convert);
  } else if (o.from == "llama2c") {
    if (o.tokenizer_path.empty()) {
      return make_error(StatusCode::kInvalidArgument,
                        "--from llama2c needs --tokenizer TOKENIZER.bin");
    }
    summary = convert_llama2c_model(o.input, o.tokenizer_path, o.convert);
  } else {
    return make_error(StatusCode::kInvalidArgument, "--from '{}': use hf or llama2c", o.from);
  }
  if (!summary.is_ok()) return summary.status();
  print_summary(*summary, o.convert.output_path, o.convert.type);
  return Status::ok();
}

std::function<int()> setup_convert(CLI::App& sub) {
  auto o = std::make_shared<ConvertCliOptions>();
  sub.add_option("input", o->input, "Hugging Face model directory, or llama2.c MODEL.bin")
      ->required();
  sub.add_option("-o,--output", o->convert.output_path, "GGUF file to write")->required();
  sub.add_option("--from", o->from, "input format: hf or llama2c")->capture_default_str();
  sub.add_option("--tokenizer", o->tokenizer_path, "llama2.c tokenizer.bin (--from llama2c)");
  sub.add_option("--type", o->convert.type,
                 "tensor type: " + file_type_names() + " (quantized types use quantize's mix)")
      ->capture_default_str();
  sub.add_option("--name", o->convert.name, "general.name (default: the input's name)");
  sub.add_option("-t,--threads", o->convert.threads, "threads (0 = all cores)")
      ->capture_default_str();
  sub.add_option("--progress", o->progress, "auto, bar, lines or none")->capture_default_str();
  return [o] {
    Status status = run_convert(*o);
    if (!status.is_ok()) {
      std::fprintf(stderr, "llamaserve convert: %s\n", status.to_string().c_str());
      return 1;
    }
    return 0;
  };
}

}  // namespace

LLAMASERVE_COMMAND(convert, "convert",
                   "Convert a Hugging Face (safetensors) or llama2.c checkpoint to GGUF",
                   setup_convert);

}  // namespace llamaserve::cli
