// Synthetic models for the commands: the vocabulary a synthetic model copies its tokenizer from
// when none is given (synth, bench --synth), and bench's model synthesized in memory.
#pragma once

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "core/status.h"
#include "model/importers/synth_memory.h"
#include "model/shapes.h"
#include "model/weights.h"
#include "service/load_progress.h"

namespace llamaserve::cli {

// Where the default vocabularies are looked for, in each ancestor of a starting directory:
// share/llamaserve/ (installed beside bin/, and copied there in a build directory) and
// tests/fixtures/ (a source tree).
inline constexpr std::string_view kVocabDirs[] = {"share/llamaserve", "tests/fixtures"};

// The vocabulary `file` a synthetic model copies its tokenizer from when none is given: the
// first of kVocabDirs that has it, in the nearest ancestor of the binary's directory, then of
// the working directory. `flag` names the option that overrides it, for the error.
inline Result<std::string> find_default_vocab(std::string_view file, std::string_view flag) {
  namespace fs = std::filesystem;
  std::vector<fs::path> starts;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) starts.push_back(exe.parent_path());
  starts.push_back(fs::current_path(ec));
  std::string searched;
  for (const fs::path& start : starts) {
    for (fs::path dir = start; !dir.empty(); dir = dir.parent_path()) {
      for (std::string_view sub : kVocabDirs) {
        const fs::path candidate = dir / sub / file;
        if (fs::exists(candidate, ec)) return candidate.lexically_normal().string();
      }
      if (dir == dir.parent_path()) break;
    }
    searched += (searched.empty() ? "" : ", ") + start.string();
  }
  return make_error(StatusCode::kNotFound,
                    "no {} given and {} was not found in share/llamaserve/ or tests/fixtures/ "
                    "of {} or any directory above; pass {} FILE (a GGUF with the tokenizer)",
                    flag, file, searched, flag);
}

// The model of `spec` (SHAPE:TYPE) written into memory on all cores and loaded as
// load_model_for_device would load a file (prefaulted on the CPU). Says on stderr how long
// the synthesis took. `vocab_path` empty: the shape's default vocabulary
// (find_default_vocab).
inline Result<std::shared_ptr<const LoadedModel>> synthesize_for_device(
    const std::string& spec, const std::string& vocab_path, const std::string& device) {
  LS_ASSIGN_OR_RETURN(const SynthSpec parsed, parse_synth_spec(spec));
  SynthOptions synth;
  synth.shape = parsed.shape;
  synth.type = parsed.type;
  synth.vocab_path = vocab_path;
  synth.threads = 0;  // all cores
  if (synth.vocab_path.empty()) {
    LS_ASSIGN_OR_RETURN(const ModelShape* shape, find_model_shape(parsed.shape));
    LS_ASSIGN_OR_RETURN(synth.vocab_path, find_default_vocab(shape->vocab_file, "--synth-vocab"));
  }
  LoadProgress progress("synthetic " + spec);
  LoadOptions load;
  load.prefault = runs_on_cpu(device);
  load.on_progress = progress.callback();
  LS_ASSIGN_OR_RETURN(InMemoryModel m, synthesize_in_memory(synth, load));
  progress.finish();
  const double gib = static_cast<double>(m.summary.n_bytes) / (1ull << 30);
  fmt::print(stderr,
             "synthesized {} in memory: {:.2f} GiB of weights in {:.1f} s ({:.2f} GiB/s, {} "
             "threads), loaded in {:.1f} s\n",
             spec, gib, m.synth_seconds, gib / m.synth_seconds, m.threads, m.load_seconds);
  return m.model;
}

}  // namespace llamaserve::cli
