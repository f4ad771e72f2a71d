#include "model/importers/synth_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

#include "core/thread_pool.h"
#include "model/importers/file_types.h"
#include "model/plan.h"
#include "model/shapes.h"

namespace llamaserve {
namespace {

// Closes the memory file when synthesis or loading fails; the loaded model keeps its own
// mapping, so the descriptor is closed on success too.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() { ::close(fd_); }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Result<SynthSpec> parse_synth_spec(std::string_view text) {
  SynthSpec spec;
  const size_t colon = text.find(':');
  spec.shape = std::string(text.substr(0, colon));
  spec.type = colon == std::string_view::npos ? "f16" : std::string(text.substr(colon + 1));
  Status status = find_model_shape(spec.shape).status();
  if (status.is_ok()) status = parse_file_type(spec.type).status();
  if (!status.is_ok()) {
    return status.with_context(
        fmt::format("synthetic model '{}' (SHAPE:TYPE, e.g. llama2-7b:f16)", text));
  }
  return spec;
}

Result<uint64_t> synthetic_tensor_bytes(const SynthOptions& options) {
  LS_ASSIGN_OR_RETURN(const ModelShape* shape, find_model_shape(options.shape));
  LS_ASSIGN_OR_RETURN(const FileType file_type, parse_file_type(options.type));
  uint64_t total = 0;
  for (const NamedTensorBytes& t : llama_tensor_bytes(config_from_shape(*shape), file_type)) {
    total += t.n_bytes;
  }
  return total;
}

std::optional<uint64_t> available_memory_bytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return std::nullopt;
  std::optional<uint64_t> bytes;
  char line[256];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long long kib = 0;
    if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
      bytes = static_cast<uint64_t>(kib) * 1024;
      break;
    }
  }
  std::fclose(f);
  return bytes;
}

Status check_memory_for(std::string_view what, uint64_t needed_bytes,
                        std::optional<uint64_t> available_bytes) {
  if (!available_bytes || needed_bytes <= *available_bytes) return Status::ok();
  return make_error(StatusCode::kResourceExhausted,
                    "{} needs {} of memory, but only {} is available (MemAvailable); use a "
                    "smaller shape or weight type, or free memory",
                    what, format_size(needed_bytes), format_size(*available_bytes));
}

Result<InMemoryModel> synthesize_in_memory(const SynthOptions& options, const LoadOptions& load) {
  LS_ASSIGN_OR_RETURN(const uint64_t tensor_bytes, synthetic_tensor_bytes(options));
  LS_RETURN_IF_ERROR(
      check_memory_for(fmt::format("synthesizing {} {} in memory", options.shape, options.type),
                       tensor_bytes, available_memory_bytes()));

  const std::string name = fmt::format("llamaserve-synth-{}-{}", options.shape, options.type);
  const int fd = memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fd < 0) {
    return make_error(StatusCode::kIo, "memfd_create for the synthetic model failed: {}",
                      std::strerror(errno));
  }
  FdCloser closer(fd);

  InMemoryModel out;
  SynthOptions synth = options;
  if (synth.threads <= 0) synth.threads = ThreadPool::default_threads();
  out.threads = synth.threads;
  const auto synth_start = std::chrono::steady_clock::now();
  LS_ASSIGN_OR_RETURN(out.summary, write_synthetic_model_to_fd(synth, fd));
  out.synth_seconds = seconds_since(synth_start);

  const auto load_start = std::chrono::steady_clock::now();
  Result<std::shared_ptr<const LoadedModel>> model =
      load_model(fmt::format("/proc/self/fd/{}", fd), load);
  if (!model.is_ok()) {
    return model.status().with_context(
        fmt::format("loading the synthetic {} {} from memory", options.shape, options.type));
  }
  out.model = std::move(model).value();
  out.load_seconds = seconds_since(load_start);
  return out;
}

}  // namespace llamaserve
