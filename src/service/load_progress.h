// Model loading as run, chat, serve and bench report it on stderr: a bar when stderr is a
// terminal, otherwise an info log line when done (plus one per quarter of a slow load), so that
// the logs of a service or a batch job carry no terminal control characters.
//
// The weights are prefaulted (read into memory before the first request) only for the CPU
// device, whose kernels read them from the mapping at every step; a CUDA executor reads each
// byte once while uploading.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "core/progress.h"
#include "core/status.h"
#include "model/weights.h"
#include "service/layout_factory.h"

namespace llamaserve {

class LoadProgress {
 public:
  explicit LoadProgress(const std::string& model_path)
      : label_("loading " + std::filesystem::path(model_path).filename().string()) {}

  // For LoadOptions::on_progress and prefault_weights; valid while this object lives. The
  // Progress is made at the first report, which carries the total.
  LoadProgressFn callback() {
    return [this](uint64_t done_bytes, uint64_t total_bytes, std::string_view tensor) {
      if (!progress_) {
        const ProgressStyle style =
            isatty(STDERR_FILENO) ? ProgressStyle::kBar : ProgressStyle::kLog;
        progress_ =
            std::make_unique<Progress>(label_, total_bytes, ProgressUnit::kBytes, style, stderr);
      }
      progress_->update(done_bytes, tensor);
    };
  }

  // The final line; without it (the load failed) a bar only ends its line.
  void finish() {
    if (progress_) progress_->finish();
  }

 private:
  std::string label_;
  std::unique_ptr<Progress> progress_;
};

// True for --device values that run on the CPU. Malformed values are left to create_executor,
// which names what it accepts.
inline bool runs_on_cpu(const std::string& device) {
  Result<DeviceChoice> choice = parse_device(device);
  return choice.is_ok() && choice->kind == DeviceChoice::Kind::kCpu;
}

// load_model, prefaulting the weights when they stay on the CPU; with show_progress, reporting
// the load as LoadProgress does.
inline Result<std::shared_ptr<const LoadedModel>> load_model_for_device(
    const std::string& model_path, const std::string& device, bool show_progress = true) {
  LoadProgress progress(model_path);
  LoadOptions options;
  options.prefault = runs_on_cpu(device);
  if (show_progress) options.on_progress = progress.callback();
  LS_ASSIGN_OR_RETURN(std::shared_ptr<const LoadedModel> model, load_model(model_path, options));
  progress.finish();
  return model;
}

}  // namespace llamaserve
