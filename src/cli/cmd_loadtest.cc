// llamaserve loadtest: the serving benchmark. Drives any OpenAI-compatible server with
// streamed requests at a sweep of concurrencies (closed loop) or request rates (open loop,
// Poisson arrivals) and reports throughput, TTFT, ITL and end-to-end latency percentiles and
// goodput per step (src/loadtest/, docs/loadtest.md).
//
//   llamaserve loadtest --url http://127.0.0.1:8080 (-c 1,16,64,256 | --rate 2,8,32)
//                       [--prompt-tokens 128|64:256] [--output-tokens 128] [--prompts FILE]
//                       [--duration S | --requests N] --out DIR
//
// Exit status: 0 when the reports were written and some request succeeded, 3 when the
// reports were written but no request succeeded, 1 on an error (nothing written), 2 on bad
// flags.
#include <sys/resource.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>

#include "cli/command.h"
#include "loadtest/config.h"
#include "loadtest/loadtest.h"

namespace llamaserve::cli {
namespace {

// The command line as typed (for the report), arguments with spaces or quotes single-quoted.
std::string own_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string out;
  size_t start = 0;
  while (start < raw.size()) {
    size_t end = raw.find('\0', start);
    if (end == std::string::npos) end = raw.size();
    std::string arg = raw.substr(start, end - start);
    if (arg.empty() || arg.find_first_of(" \t\"'$\\") != std::string::npos) {
      std::string quoted = "'";
      for (char c : arg) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
      arg = quoted + "'";
    }
    out += (out.empty() ? "" : " ") + arg;
    start = end + 1;
  }
  return out;
}

// Each stream and each open-loop arrival in flight holds a socket.
void raise_descriptor_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
}

// A CLI11 check that the text is a length or a MIN:MAX range.
std::string check_length(const std::string& text) {
  Result<loadtest::LengthRange> range = loadtest::parse_length_range(text);
  return range.is_ok() ? std::string() : range.status().message();
}

std::function<int()> setup_loadtest(CLI::App& sub) {
  auto c = std::make_shared<loadtest::LoadtestConfig>();
  auto prompt_tokens = std::make_shared<std::string>("128");
  auto output_tokens = std::make_shared<std::string>("128");
  sub.add_option("--url", c->url, "server base URL, http://HOST:PORT[/PATH]")
      ->capture_default_str();
  sub.add_option("--api-key", c->api_key, "sent as 'Authorization: Bearer KEY'");
  sub.add_option("--model", c->model,
                 "the requests' \"model\" (default: the first of GET /v1/models)");
  const std::map<std::string, loadtest::Endpoint> endpoints = {
      {"completions", loadtest::Endpoint::kCompletions}, {"chat", loadtest::Endpoint::kChat}};
  sub.add_option("--endpoint", c->endpoint,
                 "completions (/v1/completions) or chat (/v1/chat/completions)")
      ->transform(CLI::CheckedTransformer(endpoints, CLI::ignore_case))
      ->default_str("completions");
  sub.add_option("-c,--concurrency", c->concurrencies,
                 "closed loop: streams sending back to back, one step per value (1,16,64,256)")
      ->delimiter(',');
  sub.add_option("--rate", c->rates_per_s,
                 "open loop: Poisson arrivals in requests/s, one step per value (2,8,32)")
      ->delimiter(',');
  sub.add_option("--duration", c->duration_s,
                 "seconds per step before it stops sending (default 60 when --requests is not "
                 "given)");
  sub.add_option("--requests", c->requests, "requests per step (with --duration: what ends first)");
  sub.add_option("--warmup-requests", c->warmup_requests,
                 "requests before the first step, not counted")
      ->capture_default_str();
  sub.add_option("--request-timeout-s", c->request_timeout_s,
                 "a request not answered in full by then is cut and counted failed")
      ->capture_default_str();
  sub.add_option("--prompt-tokens", *prompt_tokens, "prompt length: N or MIN:MAX (uniform)")
      ->check(check_length)
      ->capture_default_str();
  sub.add_option("--output-tokens", *output_tokens,
                 "output length: N or MIN:MAX (max_tokens, with ignore_eos)")
      ->check(check_length)
      ->capture_default_str();
  sub.add_option("--prompts", c->prompts_file,
                 "JSONL prompts, one object a line: \"prompt\" or \"messages\", optional "
                 "\"max_tokens\"")
      ->check(CLI::ExistingFile);
  sub.add_option("--shared-prefix-tokens", c->shared_prefix_tokens,
                 "the same prefix of N tokens at the start of every prompt (prefix-cache tests)")
      ->capture_default_str();
  const std::map<std::string, loadtest::PromptFormat> formats = {
      {"auto", loadtest::PromptFormat::kAuto},
      {"tokens", loadtest::PromptFormat::kTokens},
      {"text", loadtest::PromptFormat::kText}};
  sub.add_option("--prompt-format", c->prompt_format,
                 "tokens: token-id prompts of exact length (needs POST /tokenize), text: words, "
                 "auto: tokens when the server tokenizes")
      ->transform(CLI::CheckedTransformer(formats, CLI::ignore_case))
      ->default_str("auto");
  sub.add_flag("!--no-ignore-eos", c->ignore_eos,
               "let requests stop at end-of-sequence before --output-tokens");
  sub.add_option("--temperature", c->temperature,
                 "the requests' sampling temperature (0: greedy); not sent by default")
      ->check(CLI::Range(0.0, 2.0));
  sub.add_option("--seed", c->seed, "lengths, prompt words and arrival times")
      ->capture_default_str();
  sub.add_option("--slo-ttft-ms", c->slo_ttft_ms, "goodput: time to first token at most this");
  sub.add_option("--slo-itl-ms", c->slo_itl_ms,
                 "goodput: the request's p99 inter-token latency at most this");
  sub.add_option("--out", c->out_dir, "folder for report.json, report.md, report.gp, .svg, .png")
      ->required();
  sub.add_option("--gnuplot", c->gnuplot, "the gnuplot program")->capture_default_str();
  sub.add_option("--progress", c->progress,
                 "auto (a bar on a terminal, else a line per step), bar, lines or none")
      ->capture_default_str();
  sub.add_option("--max-connections", c->max_connections,
                 "open loop: connections at most; later arrivals wait for one")
      ->capture_default_str();
  return [c, prompt_tokens, output_tokens] {
    c->prompt_tokens = loadtest::parse_length_range(*prompt_tokens).value();
    c->output_tokens = loadtest::parse_length_range(*output_tokens).value();
    c->command_line = own_command_line();
    if (Status valid = loadtest::finalize_config(*c); !valid.is_ok()) {
      std::fprintf(stderr, "llamaserve loadtest: %s\n", valid.message().c_str());
      return 2;
    }
    raise_descriptor_limit();
    std::signal(SIGPIPE, SIG_IGN);  // a server that hangs up is a failed request, not an exit
    Result<loadtest::RunOutcome> outcome = loadtest::run_loadtest(*c);
    if (!outcome.is_ok()) {
      std::fprintf(stderr, "llamaserve loadtest: %s\n", outcome.status().to_string().c_str());
      return 1;
    }
    if (outcome->ok == 0) {
      std::fprintf(stderr, "llamaserve loadtest: no request succeeded (%lld failed)\n",
                   static_cast<long long>(outcome->failed));
      return 3;
    }
    return 0;
  };
}

}  // namespace

LLAMASERVE_COMMAND(loadtest, "loadtest",
                   "Measure an OpenAI-compatible server under a sweep of concurrencies or rates",
                   setup_loadtest);

}  // namespace llamaserve::cli
