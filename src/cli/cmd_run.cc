// llamaserve run: raw completion of a prompt (no chat template), streamed to stdout.
//
//   llamaserve run -m MODEL -p PROMPT [-n N] [--temp T] [--seed S] [--top-k K] [--top-p P]
//                  [--threads N] [--cpu-isa auto|avx512|avx2] [--verbose]
//
// stdout carries only the generated text, written as it is generated; logs and --verbose
// speed figures go to stderr. Exit code 0 on success, 1 on any error.
#include <unistd.h>

#include <cstdio>

#include "cli/command.h"
#include "cli/generation_options.h"
#include "service/model_service.h"
#include "tokenizer/tokenizer.h"

namespace llamaserve::cli {
namespace {

struct RunOptions {
  GenerationOptions generation;
  std::string prompt;
};

Status write_stdout(std::string_view text) {
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0) {
    return Status(StatusCode::kIo, "error writing to standard output");
  }
  return Status::ok();
}

Status run_completion(const RunOptions& options) {
  LS_ASSIGN_OR_RETURN(std::unique_ptr<ModelService> model,
                      ModelService::open(options.generation.model));
  GenerationRequest request;
  request.id = "run";
  // Control tokens written in the prompt (<|im_start|>, <s>) are honoured: a raw completion
  // is how one feeds a hand-made template.
  request.prompt_tokens =
      model->tokenizer().encode(options.prompt, /*add_special=*/true, /*parse_special=*/true);
  LS_ASSIGN_OR_RETURN(request.max_new_tokens,
                      budget_new_tokens(options.generation, request.prompt_tokens.size(),
                                        model->engines().max_context()));
  request.sampling = sampling_params(options.generation);
  request.ignore_eos = options.generation.ignore_eos;

  Status write_status;
  LS_ASSIGN_OR_RETURN(Completion completion,
                      generate(model->engines(), std::move(request), [&](std::string_view text) {
                        if (write_status.is_ok()) write_status = write_stdout(text);
                      }));
  LS_RETURN_IF_ERROR(write_status);
  if (isatty(STDOUT_FILENO)) LS_RETURN_IF_ERROR(write_stdout("\n"));
  if (options.generation.verbose) print_speed(completion.usage);
  if (completion.finish_reason == FinishReason::kError ||
      completion.finish_reason == FinishReason::kTimeout) {
    return completion.error;
  }
  return Status::ok();
}

std::function<int()> setup_run(CLI::App& sub) {
  auto options = std::make_shared<RunOptions>();
  add_generation_options(sub, options->generation);
  sub.add_option("-p,--prompt", options->prompt, "text to complete")->required();
  return [options] {
    Status status = run_completion(*options);
    if (!status.is_ok()) {
      std::fprintf(stderr, "llamaserve run: %s\n", status.to_string().c_str());
      return 1;
    }
    return 0;
  };
}

}  // namespace

LLAMASERVE_COMMAND(run, "run", "Complete a prompt (no chat template) and print the generated text",
                   setup_run);

}  // namespace llamaserve::cli
