#include "model/importers/synth_model.h"

#include <cmath>
#include <functional>

#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "model/importers/file_types.h"
#include "model/importers/gguf_build.h"
#include "model/importers/llama_tensors.h"
#include "model/shapes.h"

namespace llamaserve {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Four 16-bit uniforms summed (Irwin-Hall): mean 2 * 65535, variance 4 * (65536² - 1) / 12.
// Centred and scaled to unit variance; bounded by ±2·sqrt(3).
constexpr float kIrwinHallScale = 1.7320508f / 65536.0f;  // sqrt(12 / 4) / 65536

inline float value_from_hash(uint64_t h) {
  const uint32_t sum = static_cast<uint32_t>(h & 0xffff) +
                       static_cast<uint32_t>((h >> 16) & 0xffff) +
                       static_cast<uint32_t>((h >> 32) & 0xffff) + static_cast<uint32_t>(h >> 48);
  return (static_cast<float>(sum) - 2.0f * 65535.0f) * kIrwinHallScale;
}

uint64_t tensor_key(uint64_t seed, uint64_t tensor_index) {
  return splitmix64(seed ^ splitmix64(tensor_index + 1));
}

using WritePlanned =
    std::function<Status(GgufWriter& writer, const std::vector<PlannedTensor>& tensors,
                         ThreadPool& pool, Progress* progress)>;

// Plans the model of `options` and writes it with `write` (to a path or into a descriptor).
Result<ConvertSummary> write_synthetic(const SynthOptions& options, const WritePlanned& write) {
  LS_ASSIGN_OR_RETURN(const ModelShape* shape, find_model_shape(options.shape));
  LS_ASSIGN_OR_RETURN(const FileType file_type, parse_file_type(options.type));
  if (!(options.stddev > 0.0f) || !std::isfinite(options.stddev)) {
    return make_error(StatusCode::kInvalidArgument, "stddev {} must be positive", options.stddev);
  }
  Result<std::unique_ptr<GgufFile>> vocab = GgufFile::open(options.vocab_path);
  if (!vocab.is_ok()) return vocab.status().with_context("vocabulary file");
  const GgufArray* tokens = (*vocab)->get_array("tokenizer.ggml.tokens");
  if (tokens == nullptr) {
    return make_error(StatusCode::kNotFound, "vocabulary file '{}' has no tokenizer.ggml.tokens",
                      options.vocab_path);
  }
  if (static_cast<int64_t>(tokens->size()) != shape->n_vocab) {
    return make_error(StatusCode::kInvalidArgument,
                      "vocabulary file '{}' has {} tokens, but shape {} needs {} (its usual "
                      "vocabulary is {})",
                      options.vocab_path, tokens->size(), shape->name, shape->n_vocab,
                      shape->vocab_file);
  }
  const ModelConfig config = config_from_shape(*shape);

  ConvertSummary summary;
  summary.config = config;
  summary.tokenizer_model = (*vocab)->get_string("tokenizer.ggml.model").value_or("");
  summary.tokenizer_pre = (*vocab)->get_string("tokenizer.ggml.pre").value_or("");

  std::vector<PlannedTensor> tensors;
  std::vector<std::pair<std::string, std::string>> fallbacks;
  const std::vector<LlamaTensorSpec> specs = llama_tensor_specs(config);
  for (size_t i = 0; i < specs.size(); ++i) {
    const LlamaTensorSpec& spec = specs[i];
    PlannedTensor t;
    t.name = spec.name;
    t.dims = spec.dims;
    const TensorTypeChoice choice =
        choose_tensor_type(file_type, spec.name, spec.dims, config.n_layer, config.tied_output);
    t.type = choice.type;
    if (!choice.fallback_note.empty()) fallbacks.emplace_back(spec.name, choice.fallback_note);
    const uint64_t cols = spec.dims[0];
    if (spec.dims.size() == 1) {
      t.generate = [cols](int64_t, float* out) { std::fill(out, out + cols, 1.0f); };
    } else {
      const uint64_t key = tensor_key(options.seed, i);
      const float scale = options.stddev;
      t.generate = [key, cols, scale](int64_t row, float* out) {
        const uint64_t first = static_cast<uint64_t>(row) * cols;
        for (uint64_t c = 0; c < cols; ++c) {
          out[c] = scale * value_from_hash(splitmix64(key + first + c));
        }
      };
    }
    tensors.push_back(std::move(t));
  }
  summary.notes = group_tensor_notes(fallbacks);

  GgufWriter writer;
  set_llama_metadata(writer, config,
                     fmt::format("synthetic {} (seed {})", shape->name, options.seed),
                     file_type.id);
  copy_tokenizer_metadata(**vocab, writer);

  ThreadPool pool(options.threads > 0 ? options.threads : ThreadPool::default_threads());
  summary.n_tensors = tensors.size();
  summary.n_bytes = planned_bytes(tensors);
  Progress progress("synth", summary.n_bytes, ProgressUnit::kBytes, options.progress);
  LS_RETURN_IF_ERROR(write(writer, tensors, pool, &progress));
  return summary;
}

}  // namespace

float synthetic_value(uint64_t seed, uint64_t tensor_index, uint64_t index) {
  return value_from_hash(splitmix64(tensor_key(seed, tensor_index) + index));
}

Result<ConvertSummary> write_synthetic_model(const SynthOptions& options) {
  if (options.output_path.empty()) {
    return make_error(StatusCode::kInvalidArgument, "no output path given (-o FILE)");
  }
  return write_synthetic(options, [&](GgufWriter& writer, const std::vector<PlannedTensor>& tensors,
                                      ThreadPool& pool, Progress* progress) {
    return write_planned_gguf(writer, tensors, options.output_path, pool, progress);
  });
}

Result<ConvertSummary> write_synthetic_model_to_fd(const SynthOptions& options, int fd) {
  return write_synthetic(
      options, [fd](GgufWriter& writer, const std::vector<PlannedTensor>& tensors, ThreadPool& pool,
                    Progress* progress) {
        return write_planned_gguf_to_fd(writer, tensors, fd, pool, progress);
      });
}

}  // namespace llamaserve
